use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;

use awf_domain::ErrorCode;
use awf_domain::ports::WorkflowRepository;
use awf_domain::ports::repository::ConfigSource;
use awf_domain::ports::repository::Severity;
use awf_yaml::RepoPaths;
use awf_yaml::YamlRepository;
use pretty_assertions::assert_eq;
use serde_json::json;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn simple(name: &str, version: &str) -> String {
    format!(
        "name: {name}\nversion: \"{version}\"\ndescription: d-{name}\nstates:\n  initial: done\n  done: {{type: terminal}}\n"
    )
}

#[test]
fn paths_from_env() {
    let cwd = Path::new("/work/p");
    let p = RepoPaths::from_env(cwd, &env(&[("HOME", "/home/u")]), Path::new("/data/awf"));
    assert_eq!(
        p,
        RepoPaths {
            cwd: cwd.to_path_buf(),
            env_dirs: Vec::new(),
            local_dir: PathBuf::from("/work/p/.awf/workflows"),
            global_dir: PathBuf::from("/home/u/.config/awf/workflows"),
            template_dirs: vec![
                PathBuf::from("/work/p/.awf/templates"),
                PathBuf::from("/data/awf/templates")
            ],
            config_path: PathBuf::from("/work/p/.awf/config.yaml"),
        }
    );
    let p = RepoPaths::from_env(
        cwd,
        &env(&[
            ("HOME", "/home/u"),
            ("XDG_CONFIG_HOME", "/xdg"),
            ("AWF_WORKFLOWS_PATH", "wfs"),
            ("AWF_CONFIG_PATH", "/c.yaml"),
        ]),
        Path::new("/data/awf"),
    );
    assert_eq!(p.env_dirs, vec![PathBuf::from("/work/p/wfs")]);
    assert_eq!(p.global_dir, PathBuf::from("/xdg/awf/workflows"));
    assert_eq!(p.config_path, PathBuf::from("/c.yaml"));
    let p = RepoPaths::from_env(
        cwd,
        &env(&[("AWF_CONFIG_HOME", "/cfg"), ("XDG_CONFIG_HOME", "/xdg")]),
        Path::new("/d"),
    );
    assert_eq!(p.global_dir, PathBuf::from("/cfg/workflows"));
}

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    repo: YamlRepository,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let cwd = root.join("proj");
    std::fs::create_dir_all(&cwd).unwrap();
    let e = env(&[
        ("HOME", root.join("home").to_str().unwrap()),
        ("AWF_WORKFLOWS_PATH", root.join("envdir").to_str().unwrap()),
    ]);
    write(&root.join("envdir/shared.yaml"), &simple("from-env", "1"));
    write(
        &cwd.join(".awf/workflows/shared.yaml"),
        &simple("from-local", "2"),
    );
    write(
        &cwd.join(".awf/workflows/local-only.yaml"),
        &simple("local-only", "3"),
    );
    write(&cwd.join(".awf/workflows/broken.yaml"), "name: [\n");
    write(
        &root.join("home/.config/awf/workflows/global-only.yaml"),
        &simple("global-only", "4"),
    );
    write(
        &root.join("home/.config/awf/workflows/shared.yaml"),
        &simple("from-global", "5"),
    );
    let repo = YamlRepository::new(RepoPaths::from_env(&cwd, &e, &root.join("data")));
    Fixture {
        _tmp: tmp,
        root,
        repo,
    }
}

#[test]
fn lookup_order_first_hit_wins() {
    let f = fixture();
    let l = f.repo.load("shared", None).unwrap();
    assert_eq!(l.workflow.name, "from-env");
    assert_eq!(l.workflow.source.identifier, "shared");
    assert_eq!(
        l.workflow.source.path,
        Some(f.root.join("envdir/shared.yaml"))
    );
    assert_eq!(l.workflow.source.dir, f.root.join("envdir"));
    assert_eq!(
        f.repo.load("local-only.yaml", None).unwrap().workflow.name,
        "local-only"
    );
    assert_eq!(
        f.repo.load("global-only", None).unwrap().workflow.name,
        "global-only"
    );
    // A base dir (sub-workflow calls) is searched first.
    write(&f.root.join("base/shared.yaml"), &simple("from-base", "9"));
    assert_eq!(
        f.repo
            .load("shared", Some(&f.root.join("base")))
            .unwrap()
            .workflow
            .name,
        "from-base"
    );
}

/// A relative path a calling workflow names is found from that workflow's directory when
/// the working directory has no such file (a parent run from elsewhere); the working
/// directory's file still wins; not found, the error says both places.
#[test]
fn a_callers_relative_path_is_looked_up_beside_it_too() {
    let f = fixture();
    let base = f.root.join("proj/wf");
    std::fs::create_dir_all(&base).unwrap();
    write(
        &f.root.join("proj/shared/child.yaml"),
        &simple("beside", "1"),
    );
    let l = f.repo.load("../shared/child.yaml", Some(&base)).unwrap();
    assert_eq!(l.workflow.name, "beside");
    assert_eq!(
        l.workflow.source.dir.canonicalize().unwrap(),
        f.root.join("proj/shared").canonicalize().unwrap()
    );
    // Without a caller, or with the file in the working directory, the working directory.
    assert!(f.repo.load("../shared/child.yaml", None).is_err());
    write(&f.root.join("proj/sub/c.yaml"), &simple("from-cwd", "1"));
    write(
        &f.root.join("proj/wf/sub/c.yaml"),
        &simple("from-base", "1"),
    );
    assert_eq!(
        f.repo
            .load("./sub/c.yaml", Some(&base))
            .unwrap()
            .workflow
            .name,
        "from-cwd"
    );
    let e = f.repo.load("./nowhere/x.yaml", Some(&base)).err().unwrap();
    assert_eq!(e.code(), ErrorCode::UserInputMissingFile);
    let hint = e.hints().join(" ");
    assert!(
        hint.contains("working directory") && hint.contains(&format!("({})", base.display())),
        "{hint}"
    );
}

#[test]
fn existing_path_wins_and_missing_paths_suggest() {
    let f = fixture();
    let p = f.root.join("elsewhere/wf-one.yaml");
    write(&p, &simple("path-one", "1"));
    assert_eq!(
        f.repo
            .load(p.to_str().unwrap(), None)
            .unwrap()
            .workflow
            .name,
        "path-one"
    );
    let typo = f.root.join("elsewhere/wf-oen.yaml");
    let e = f.repo.load(typo.to_str().unwrap(), None).unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserInputMissingFile);
    assert_eq!(e.hints(), ["did you mean 'wf-one.yaml'?"]);
}

#[test]
fn not_found_suggests_a_known_name() {
    let f = fixture();
    let e = f.repo.load("sahred", None).unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserFacadeWorkflowNotFound);
    assert_eq!(e.message(), "workflow not found: sahred");
    assert_eq!(e.hints(), ["did you mean 'shared'?"]);
    let e = f.repo.load("../envdir/shared", None).unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserInputMissingFile);
    let e = f.repo.load("  ", None).unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserFacadeIdentifierEmpty);
}

#[test]
fn broken_file_is_a_parse_error_with_position() {
    let f = fixture();
    let e = f.repo.load("broken", None).unwrap_err();
    assert_eq!(e.code(), ErrorCode::WorkflowParseYamlSyntax);
    assert!(e.message().contains("line 2"), "{}", e.message());
    assert!(e.details().contains_key("file"));
}

#[test]
fn list_dedups_by_name_first_source_wins() {
    let f = fixture();
    let got: Vec<(String, String, Option<String>, Option<String>)> = f
        .repo
        .list()
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.source, e.version, e.description))
        .collect();
    let s = |x: &str| Some(x.to_owned());
    assert_eq!(
        got,
        vec![
            ("shared".into(), "env".into(), s("1"), s("d-from-env")),
            ("broken".into(), "local".into(), None, None),
            (
                "local-only".into(),
                "local".into(),
                s("3"),
                s("d-local-only")
            ),
            (
                "global-only".into(),
                "global".into(),
                s("4"),
                s("d-global-only")
            ),
        ]
    );
}

#[test]
fn templates_come_from_template_dirs() {
    let f = fixture();
    let cwd = f.root.join("proj");
    write(
        &f.root.join("data/templates/greet.yaml"),
        "name: greet\nparameters: [{name: who, default: world}]\nstates:\n  greet: {type: step, command: 'echo hello {{parameters.who}}'}\n",
    );
    write(
        &cwd.join(".awf/workflows/t.yaml"),
        "name: t\nstates:\n  initial: a\n  a:\n    use_template: greet\n    on_success: done\n  done: {type: terminal}\n",
    );
    let l = f.repo.load("t", None).unwrap();
    assert_eq!(
        l.workflow.states["a"].kind,
        awf_domain::workflow::StateKind::Command(awf_domain::workflow::CommandStep {
            source: awf_domain::workflow::CommandSource::Inline("echo hello world".into()),
            dir: None
        })
    );
}

#[test]
fn config_inputs_known_and_unknown_keys() {
    let f = fixture();
    let repo = f.repo.clone();
    assert_eq!(repo.load_config().unwrap(), Default::default());
    let path = f.root.join("proj/.awf/config.yaml");
    write(
        &path,
        "version: \"1\"\nlog_level: debug\ninputs:\n  api_key: abc\n  count: 3\n  flag: true\ncolour: red\n",
    );
    let c = repo.load_config().unwrap();
    assert_eq!(c.path, Some(path.clone()));
    assert_eq!(
        serde_json::Value::Object(c.inputs),
        json!({"api_key": "abc", "count": 3, "flag": true})
    );
    assert_eq!(
        serde_json::Value::Object(c.other),
        json!({"version": "1", "log_level": "debug"})
    );
    assert_eq!(c.diagnostics.len(), 1);
    assert_eq!(c.diagnostics[0].severity, Severity::Warning);
    assert_eq!(c.diagnostics[0].path, "colour");
    assert_eq!(
        (c.diagnostics[0].line, c.diagnostics[0].column),
        (Some(7), Some(1))
    );
    write(&path, "inputs:\n  a: [\n");
    let e = repo.load_config().unwrap_err();
    // A broken project configuration is a user error (exit 1), as in AWF (Go).
    assert_eq!(e.code(), ErrorCode::UserInputInvalidFormat);
    assert!(e.message().contains("line 3"), "{}", e.message());
    assert!(
        e.message().starts_with("project configuration: "),
        "{}",
        e.message()
    );
    assert!(e.details().contains_key("line"), "{:?}", e.details());
}

#[test]
fn non_utf8_workflow_file_is_a_syntax_error_with_position() {
    let f = fixture();
    let p = f.root.join("proj/.awf/workflows/latin.yaml");
    std::fs::write(&p, b"name: x\nstates:\n  init\xc3\xa9: \xff\xfe\n").unwrap();
    let e = f.repo.load("latin", None).unwrap_err();
    assert_eq!(e.code(), ErrorCode::WorkflowParseYamlSyntax);
    assert_eq!(
        e.message(),
        format!(
            "{}: line 3, column 10: the file is not valid UTF-8: byte 0xff at offset 26",
            p.display()
        )
    );
    assert_eq!(e.hints(), ["save the file as UTF-8"]);
    assert_eq!(e.details().get("line"), Some(&json!(3)));
}

#[test]
fn directory_as_workflow_path_says_it_is_a_directory() {
    let f = fixture();
    let dir = f.root.join("elsewhere");
    write(&dir.join("b.yaml"), &simple("b", "1"));
    write(&dir.join("a.yaml"), &simple("a", "1"));
    let ident = dir.to_str().unwrap();
    let e = f.repo.load(ident, None).unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserInputMissingFile);
    assert_eq!(
        e.message(),
        format!("workflow path is a directory, not a file: {ident}")
    );
    assert_eq!(
        e.hints(),
        [format!(
            "pass a workflow file inside it, e.g. {ident}/a.yaml"
        )]
    );
    let empty = f.root.join("emptydir");
    std::fs::create_dir_all(&empty).unwrap();
    let e = f.repo.load(empty.to_str().unwrap(), None).unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserInputMissingFile);
    assert_eq!(
        e.hints(),
        ["pass the path of a workflow .yaml file, or a workflow name"]
    );
}

#[test]
fn yml_files_are_found_by_name_and_listed() {
    let f = fixture();
    let cwd = f.root.join("proj");
    write(&cwd.join(".awf/workflows/short.yml"), &simple("short", "7"));
    // `.yaml` wins over `.yml` for the same stem, in lookup and in the list.
    write(
        &cwd.join(".awf/workflows/both.yml"),
        &simple("both-yml", "8"),
    );
    write(
        &cwd.join(".awf/workflows/both.yaml"),
        &simple("both-yaml", "9"),
    );
    let loaded = f.repo.load("short", None).unwrap();
    assert_eq!(loaded.workflow.name, "short");
    assert_eq!(
        f.repo.load("short.yml", None).unwrap().workflow.name,
        "short"
    );
    assert_eq!(
        f.repo.load("both", None).unwrap().workflow.name,
        "both-yaml"
    );
    let list = f.repo.list().unwrap();
    let short = list.iter().find(|e| e.name == "short").unwrap();
    assert_eq!(short.path, cwd.join(".awf/workflows/short.yml"));
    assert_eq!(short.version.as_deref(), Some("7"));
    let both: Vec<_> = list.iter().filter(|e| e.name == "both").collect();
    assert_eq!(both.len(), 1);
    assert_eq!(both[0].path, cwd.join(".awf/workflows/both.yaml"));
}

#[test]
fn list_marks_files_that_do_not_load() {
    let f = fixture();
    let list = f.repo.list().unwrap();
    let broken = list.iter().find(|e| e.name == "broken").unwrap();
    let err = broken.error.as_deref().unwrap();
    assert!(err.starts_with("[WORKFLOW.PARSE.YAML_SYNTAX] "), "{err}");
    // The entry has the path; the message does not repeat it.
    assert!(!err.contains(broken.path.to_str().unwrap()), "{err}");
    let fine = list.iter().find(|e| e.name == "local-only").unwrap();
    assert_eq!(fine.error, None);
}

#[test]
fn a_fifo_given_as_a_workflow_is_named_as_such() {
    let f = fixture();
    let cwd = f.root.join("proj");
    let status = std::process::Command::new("mkfifo")
        .arg(cwd.join("pipe.yaml"))
        .status()
        .unwrap();
    assert!(status.success());
    for ident in ["pipe.yaml", "./pipe.yaml"] {
        let e = f.repo.load(ident, None).unwrap_err();
        assert_eq!(e.code(), ErrorCode::UserInputInvalidFormat, "{ident}");
        assert_eq!(
            e.message(),
            format!("workflow path is a named pipe (FIFO), not a regular file: {ident}")
        );
        assert!(
            !e.hints().iter().any(|h| h.contains("did you mean")),
            "{:?}",
            e.hints()
        );
    }
    // A FIFO in a workflow directory, looked up by name.
    std::process::Command::new("mkfifo")
        .arg(cwd.join(".awf/workflows/named.yaml"))
        .status()
        .unwrap();
    let e = f.repo.load("named", None).unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserInputInvalidFormat);
    assert!(e.message().contains("named pipe (FIFO)"), "{}", e.message());
    // `list` shows it, marked, without reading it (reading would block).
    let list = f.repo.list().unwrap();
    let named = list.iter().find(|e| e.name == "named").unwrap();
    assert!(
        named
            .error
            .as_deref()
            .unwrap()
            .contains("named pipe (FIFO)"),
        "{named:?}"
    );
}

#[test]
fn a_symlink_loop_or_dangling_link_is_named_as_such() {
    let f = fixture();
    let cwd = f.root.join("proj");
    std::os::unix::fs::symlink(cwd.join("b.yaml"), cwd.join("a.yaml")).unwrap();
    std::os::unix::fs::symlink(cwd.join("a.yaml"), cwd.join("b.yaml")).unwrap();
    let e = f.repo.load("a.yaml", None).unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserInputMissingFile);
    assert!(
        e.message()
            .starts_with("workflow path is a symbolic link that cannot be followed"),
        "{}",
        e.message()
    );
    assert!(!e.message().contains("not found"), "{}", e.message());
    std::os::unix::fs::symlink(cwd.join("gone.yaml"), cwd.join("dangling.yaml")).unwrap();
    let e = f.repo.load("dangling.yaml", None).unwrap_err();
    assert_eq!(
        e.message(),
        "workflow path is a symbolic link whose target does not exist: dangling.yaml"
    );
}

#[test]
fn a_fifo_or_directory_as_the_project_config_is_an_error_not_a_hang() {
    let f = fixture();
    let cwd = f.root.join("proj");
    let config = cwd.join(".awf/config.yaml");
    std::process::Command::new("mkfifo")
        .arg(&config)
        .status()
        .unwrap();
    let e = f.repo.load_config().unwrap_err();
    assert_eq!(e.code(), ErrorCode::UserInputInvalidFormat);
    assert!(
        e.message()
            .ends_with("config.yaml is a named pipe (FIFO), not a regular file"),
        "{}",
        e.message()
    );
    std::fs::remove_file(&config).unwrap();
    std::fs::create_dir_all(&config).unwrap();
    let e = f.repo.load_config().unwrap_err();
    assert!(
        e.message().ends_with("is a directory, not a file"),
        "{}",
        e.message()
    );
}

#[test]
fn a_colon_separated_workflows_path_searches_each_directory_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let cwd = root.join("proj");
    std::fs::create_dir_all(&cwd).unwrap();
    write(&root.join("a/both.yaml"), &simple("both-from-a", "1"));
    write(&root.join("b/both.yaml"), &simple("both-from-b", "2"));
    write(&root.join("b/only-b.yaml"), &simple("only-b", "3"));
    let list = format!(
        "{}:{}:{}",
        root.join("a").display(),
        root.join("missing").display(),
        root.join("b").display()
    );
    let e = env(&[
        ("HOME", root.join("home").to_str().unwrap()),
        ("AWF_WORKFLOWS_PATH", &list),
    ]);
    let paths = RepoPaths::from_env(&cwd, &e, &root.join("data"));
    assert_eq!(
        paths.env_dirs,
        vec![root.join("a"), root.join("missing"), root.join("b")]
    );
    assert_eq!(
        paths.env_dir_warnings(),
        vec![format!(
            "AWF_WORKFLOWS_PATH: {} does not exist; it is skipped",
            root.join("missing").display()
        )]
    );
    let repo = YamlRepository::new(paths);
    assert_eq!(
        repo.load("both", None).unwrap().workflow.name,
        "both-from-a"
    );
    assert_eq!(repo.load("only-b", None).unwrap().workflow.name, "only-b");
    let listed: Vec<(String, String)> = repo
        .list()
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.path.display().to_string()))
        .collect();
    assert_eq!(
        listed,
        vec![
            (
                "both".to_owned(),
                root.join("a/both.yaml").display().to_string()
            ),
            (
                "only-b".to_owned(),
                root.join("b/only-b.yaml").display().to_string()
            ),
        ]
    );
}

#[test]
fn a_workflows_path_naming_one_directory_with_a_colon_is_that_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("odd:name");
    std::fs::create_dir_all(&dir).unwrap();
    let e = env(&[("AWF_WORKFLOWS_PATH", dir.to_str().unwrap())]);
    let paths = RepoPaths::from_env(tmp.path(), &e, tmp.path());
    assert_eq!(paths.env_dirs, vec![dir]);
    assert_eq!(paths.env_dir_warnings(), Vec::<String>::new());
}

/// Rooted at another directory, a repository built from the environment looks everything up
/// from there (relative paths, that project's `.awf/` and config, relative
/// `$AWF_WORKFLOWS_PATH` entries); one built from given paths changes only its working
/// directory.
#[test]
fn a_repository_rooted_elsewhere_looks_up_from_there() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let (a, b) = (root.join("a"), root.join("b"));
    for (dir, tag) in [(&a, "a"), (&b, "b")] {
        write(&dir.join("sub.yaml"), &simple(&format!("sub-{tag}"), "1"));
        write(
            &dir.join(".awf/workflows/named.yaml"),
            &simple(&format!("named-{tag}"), "1"),
        );
        write(
            &dir.join("wfs/listed.yaml"),
            &simple(&format!("listed-{tag}"), "1"),
        );
        write(
            &dir.join(".awf/config.yaml"),
            &format!("inputs:\n  who: {tag}\n"),
        );
    }
    let e = env(&[
        ("HOME", root.join("home").to_str().unwrap()),
        ("AWF_WORKFLOWS_PATH", "wfs"),
    ]);
    let repo = YamlRepository::from_env(&b, &e, &root.join("data"));
    let name = |r: &dyn WorkflowRepository, id: &str| r.load(id, None).unwrap().workflow.name;
    assert_eq!(name(&repo, "./sub.yaml"), "sub-b");
    let rooted = repo.rooted_at(&a).unwrap();
    let at_a = rooted.repository.as_ref();
    assert_eq!(name(at_a, "./sub.yaml"), "sub-a");
    assert_eq!(name(at_a, "named"), "named-a");
    assert_eq!(name(at_a, "listed"), "listed-a");
    assert_eq!(rooted.config.unwrap().inputs["who"], json!("a"));
    // Given paths: only the working directory moves.
    let fixed = YamlRepository::new(RepoPaths::from_env(&b, &e, &root.join("data")));
    let rooted = fixed.rooted_at(&a).unwrap();
    assert_eq!(name(rooted.repository.as_ref(), "./sub.yaml"), "sub-a");
    assert_eq!(name(rooted.repository.as_ref(), "named"), "named-b");
}

/// Breaker: a workflow file whose name is not UTF-8 was left out of `awf list` without a
/// word. It is listed (under its lossy name) and marked.
#[test]
fn list_marks_a_file_name_that_is_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    let f = fixture();
    let dir = f.root.join("proj/.awf/workflows");
    let name = std::ffi::OsStr::from_bytes(b"bad\xff.yaml");
    write(&dir.join(name), &simple("bad", "1"));
    let list = f.repo.list().unwrap();
    let bad = list.iter().find(|e| e.name == "bad\u{fffd}").unwrap();
    assert_eq!(
        bad.error.as_deref(),
        Some("[USER.INPUT.INVALID_FORMAT] the file name is not valid UTF-8")
    );
    assert_eq!(bad.path, dir.join(name));
}

/// A workflow reached through a symlink takes the real file's directory as its own: its
/// `call_workflow` children are found beside the file the link points to (breaker:
/// `rec/sub/v.yaml -> ../viasym.yaml` calling `link2.yaml` of `rec/` was not found, and a
/// file of the working directory was offered). A miss offers only files of the directories
/// searched.
#[test]
fn a_symlinked_workflow_finds_its_children_beside_the_real_file() {
    let f = fixture();
    let rec = f.root.join("proj/rec");
    write(&rec.join("viasym.yaml"), &simple("viasym", "1"));
    write(&rec.join("link2.yaml"), &simple("child", "1"));
    std::fs::create_dir_all(rec.join("sub")).unwrap();
    std::os::unix::fs::symlink("../viasym.yaml", rec.join("sub/v.yaml")).unwrap();
    write(&f.root.join("proj/inj.yaml"), &simple("unrelated", "1"));
    let parent = f.repo.load("rec/sub/v.yaml", None).unwrap();
    assert_eq!(
        parent.workflow.source.dir.canonicalize().unwrap(),
        rec.canonicalize().unwrap()
    );
    let child = f
        .repo
        .load("link2.yaml", Some(&parent.workflow.source.dir))
        .unwrap();
    assert_eq!(child.workflow.name, "child");
    // A miss beside the caller offers that directory's file, not the working directory's.
    let e = f
        .repo
        .load("link3.yaml", Some(&parent.workflow.source.dir))
        .unwrap_err();
    assert_eq!(e.hints(), ["did you mean 'link2.yaml'?"]);
    // A plain file keeps its own directory.
    let plain = f.repo.load("rec/viasym.yaml", None).unwrap();
    assert_eq!(plain.workflow.source.dir, f.root.join("proj/rec"));
}
