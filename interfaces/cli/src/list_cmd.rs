//! `awf list`: every workflow the repository can find (env path, project, global).
//!
//! Text: an aligned table `NAME  SOURCE  VERSION  DESCRIPTION` on stdout; JSON: an array of
//! `{"name", "source", "path", "version", "description"}`. A workflow that does not load or
//! does not pass validation is marked: its description reads `BROKEN: [CODE] message (and N
//! more error(s); …)` (`awf validate`'s first error and count, as every front-end lists a
//! broken workflow; `awf validate <name>` shows all of them) and its JSON object carries
//! `"error"`.
//!
//! `-f quiet`: the names of the workflows that are not broken, one a line (a broken one
//! cannot run; the other formats mark it). `-f table`: a bordered NAME(20) SOURCE(10)
//! VERSION(10) DESCRIPTION(40) table (AWF (Go)'s; DESCRIPTION wider when a broken entry's
//! `BROKEN: [CODE]` needs it, which is never cut).
//!
//! `awf list prompts` (alias `p`): every file under the prompt search path
//! (`$AWF_PROMPTS_PATH` = `env`, `.awf/prompts` = `local`, `<config dir>/prompts` = `global`;
//! the first directory wins for a name), sorted by source then name. Text: `NAME  SOURCE  SIZE
//! MODIFIED`; JSON: `[{"name", "source", "path", "size", "mod_time"}]` (size in bytes,
//! mod_time `YYYY-MM-DD HH:MM:SS` UTC); quiet: names; table: NAME(30) SOURCE(8) SIZE(10)
//! MODIFIED(19).
//!
//! Source: spec/workflow.md §4.2; issue 8 notes §1.7, §1.8, §2, §4 (AWF (Go)'s `list`).

use std::io::Write;

use awf_domain::ports::repository::WorkflowEntry;

use serde::Serialize;

use crate::cli::Format;
use crate::cli::ListArgs;
use crate::cli::ListWhat;
use crate::ctx::Ctx;
use crate::errors::CliError;
use crate::errors::Outcome;
use crate::json_out;
use crate::wiring;

/// Formats entries as an aligned table (header included), or a one-line notice when empty.
pub fn render_table(entries: &[WorkflowEntry]) -> String {
    if entries.is_empty() {
        return "No workflows found (looked in $AWF_WORKFLOWS_PATH, .awf/workflows and the global config dir).\n"
            .to_owned();
    }
    let header = ["NAME", "SOURCE", "VERSION", "DESCRIPTION"].map(str::to_owned);
    let rows: Vec<Vec<String>> = std::iter::once(header.to_vec())
        .chain(entries.iter().map(|e| {
            vec![
                crate::style::printable(&e.name).into_owned(),
                e.source.clone(),
                e.version.clone().unwrap_or_default(),
                description_of(e),
            ]
        }))
        .collect();
    crate::table::aligned(&rows)
}

/// One line of a workflow's description for the list (a broken entry's error instead).
fn description_of(e: &WorkflowEntry) -> String {
    let text = match &e.error {
        Some(err) => format!("BROKEN: {}", err.lines().next().unwrap_or("")),
        None => e
            .description
            .clone()
            .unwrap_or_default()
            .lines()
            .next()
            .unwrap_or("")
            .to_owned(),
    };
    crate::style::printable(&text).into_owned()
}

/// `-f table`: the bordered workflow table (the text notice when there are none). The
/// DESCRIPTION column is 40 characters wide (AWF (Go)'s), wider when a broken entry needs
/// it: its `BROKEN: [CODE] ` is never cut, and at least 20 characters of its message follow.
pub fn render_bordered(entries: &[WorkflowEntry]) -> String {
    if entries.is_empty() {
        return render_table(entries);
    }
    let description = entries
        .iter()
        .filter_map(|e| e.error.as_deref())
        .filter_map(|err| err.find("] ").map(|i| "BROKEN: ".len() + i + 2 + 20))
        .fold(40, usize::max);
    let mut t = crate::table::Table::new(&[20, 10, 10, description]);
    t.header(&["NAME", "SOURCE", "VERSION", "DESCRIPTION"]);
    for e in entries {
        t.row(&[
            crate::style::printable(&e.name).into_owned(),
            e.source.clone(),
            e.version.clone().unwrap_or_default(),
            description_of(e),
        ]);
    }
    t.sep();
    t.text().to_owned()
}

/// Runs `awf list` (workflows) or `awf list prompts`.
///
/// # Errors
/// `SYSTEM.IO.READ_FAILED` when a workflow directory cannot be read.
pub fn run(ctx: &Ctx, args: &ListArgs) -> Result<Outcome, CliError> {
    let w = wiring::build(ctx.storage.as_deref())?;
    if !ctx.quiet {
        w.warn_workflows_path(ctx.err_style);
    }
    if args.what == Some(ListWhat::Prompts) {
        return prompts(ctx, &w);
    }
    // Each file is read and parsed once: the entry shows what was parsed, and the same
    // parse is validated (what `awf validate <path>` reports). Files are independent: many
    // are read side by side.
    let listed = w.repository.listed()?;
    let entries = side_by_side(listed, |l| {
        let (mut e, loaded) = w.repository.load_listed(l);
        if let Some(mut loaded) = loaded {
            // As `awf validate <path>` names it.
            loaded.workflow.source.identifier = e.path.display().to_string();
            let report = awf_application::validate_loaded(&w.services, loaded, &w.env);
            // `awf validate`'s first error and count, as every list of workflows shows it.
            e.error = awf_domain::ports::repository::broken_summary(&report.diagnostics);
        } else if e.error.is_some() {
            // A file that does not load: `awf validate`'s first error (decoding goes on past
            // the first parse error, and its checks are ordered by position), so the list,
            // `awf validate` and `awf run` name the same one.
            let path = e.path.display().to_string();
            e.error =
                awf_application::validation::broken_summary(&w.services, &path, &w.env).or(e.error);
        }
        e
    });
    let text = match ctx.format {
        Format::Json => {
            json_out::print(&entries)?;
            return Ok(Outcome::Success);
        }
        // The names a script can run: a broken workflow (marked in the other formats) is
        // left out.
        Format::Quiet => entries
            .iter()
            .filter(|e| e.error.is_none())
            .map(|e| format!("{}\n", crate::style::printable(&e.name)))
            .collect(),
        Format::Table => render_bordered(&entries),
        Format::Text => render_table(&entries),
    };
    crate::stdout_check::checked(std::io::stdout().lock().write_all(text.as_bytes()));
    Ok(Outcome::Success)
}

/// Files one thread reads and validates before a second one is worth starting: a
/// workflow takes about 75 µs, a thread about 50 µs to start (issue 9: `awf list` of 20
/// workflows was 1.5x `just --list`). Below it, no thread is started at all.
const FILES_PER_THREAD: usize = 8;

/// `f` of each item, in order: on this thread alone for a few items, else on up to as many
/// threads as there are CPUs (at most 8), each taking a contiguous share. A thread that cannot
/// be started leaves its share to this one.
fn side_by_side<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let threads = (items.len() / FILES_PER_THREAD).clamp(1, cpus.min(8));
    if threads == 1 {
        return items.into_iter().map(f).collect();
    }
    let share = items.len().div_ceil(threads);
    let mut slots: Vec<std::sync::Mutex<Option<Vec<T>>>> = Vec::new();
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        slots.push(std::sync::Mutex::new(Some(
            items.by_ref().take(share).collect(),
        )));
    }
    // Share `i`, by whichever thread takes it first (empty for the other).
    let run = |i: usize| -> Vec<R> {
        let chunk = slots.get(i).and_then(|m| {
            m.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
        });
        chunk.map_or_else(Vec::new, |c| c.into_iter().map(&f).collect())
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (1..slots.len())
            .map(|i| {
                std::thread::Builder::new()
                    .name("awf-list".into())
                    .spawn_scoped(s, move || run(i))
                    .ok()
            })
            .collect();
        let mut out = run(0);
        for (i, h) in handles.into_iter().enumerate() {
            if let Some(h) = h {
                match h.join() {
                    Ok(r) => out.extend(r),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            // A share whose thread could not start is done here, in its place.
            out.extend(run(i + 1));
        }
        out
    })
}

/// One prompt file of `awf list prompts` (JSON shape of AWF (Go)'s `PromptInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromptEntry {
    /// Path relative to its prompts directory, `/`-separated (what `@prompts/<name>` reads).
    pub name: String,
    /// `env`, `local` or `global`.
    pub source: String,
    /// The prompts directory joined with `name` (relative for `local`: `.awf/prompts/<name>`).
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Last modification, `YYYY-MM-DD HH:MM:SS` (UTC); omitted when unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mod_time: Option<String>,
}

/// The prompt search path with each directory's source, in priority order (the same as
/// `--input k=@prompts/<file>`): `$AWF_PROMPTS_PATH` (`env`), `.awf/prompts` (`local`,
/// shown relative), `<config dir>/prompts` (`global`).
pub fn prompt_search_path(w: &wiring::Wiring) -> Vec<(std::path::PathBuf, &'static str)> {
    let mut dirs = Vec::new();
    if let Some(p) = w.env.get("AWF_PROMPTS_PATH").filter(|p| !p.is_empty()) {
        dirs.push((std::path::PathBuf::from(p), "env"));
    }
    // From a project's subdirectory, the project's (absolute); else as AWF (Go) shows it.
    let project = awf_yaml::project_root(&w.cwd);
    dirs.push((
        if project == w.cwd {
            std::path::PathBuf::from(".awf/prompts")
        } else {
            project.join(".awf").join("prompts")
        },
        "local",
    ));
    dirs.push((w.config_dir.join("prompts"), "global"));
    dirs
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of `t`.
fn day_time(t: std::time::SystemTime) -> String {
    let s = awf_domain::timefmt::format_rfc3339(t);
    s.get(..19).unwrap_or(&s).replacen('T', " ", 1)
}

/// Every file (a regular file, or a link to one) under `dir`, recursively, as
/// `(relative name, metadata)`; unreadable entries and directories are skipped, links to
/// directories are not followed.
fn walk_files(dir: &std::path::Path) -> Vec<(String, std::fs::Metadata)> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), String::new())];
    while let Some((d, prefix)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in rd.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let Ok(ft) = entry.file_type() else {
                continue;
            };
            if ft.is_dir() {
                stack.push((entry.path(), rel));
            } else if let Ok(meta) = std::fs::metadata(entry.path())
                && meta.is_file()
            {
                out.push((rel, meta));
            }
        }
    }
    out
}

/// The prompt files on `dirs` (first directory wins for a name), sorted by source then name.
pub fn collect_prompts(
    dirs: &[(std::path::PathBuf, &'static str)],
    cwd: &std::path::Path,
) -> Vec<PromptEntry> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (dir, source) in dirs {
        let abs = if dir.is_absolute() {
            dir.clone()
        } else {
            cwd.join(dir)
        };
        if !abs.is_dir() {
            continue;
        }
        for (name, meta) in walk_files(&abs) {
            if !seen.insert(name.clone()) {
                continue;
            }
            out.push(PromptEntry {
                path: dir.join(&name).display().to_string(),
                source: (*source).to_owned(),
                size: meta.len(),
                mod_time: meta.modified().ok().map(day_time),
                name,
            });
        }
    }
    out.sort_by(|a, b| (&a.source, &a.name).cmp(&(&b.source, &b.name)));
    out
}

/// Text table of prompts (`NAME  SOURCE  SIZE  MODIFIED`, columns two spaces apart).
pub fn render_prompts(prompts: &[PromptEntry]) -> String {
    let rows: Vec<Vec<String>> = std::iter::once(
        ["NAME", "SOURCE", "SIZE", "MODIFIED"]
            .map(str::to_owned)
            .to_vec(),
    )
    .chain(prompts.iter().map(|p| {
        vec![
            p.name.clone(),
            p.source.clone(),
            format!("{} B", p.size),
            p.mod_time.clone().unwrap_or_default(),
        ]
    }))
    .collect();
    crate::table::aligned(&rows)
}

fn prompts(ctx: &Ctx, w: &wiring::Wiring) -> Result<Outcome, CliError> {
    let dirs = prompt_search_path(w);
    let prompts = collect_prompts(&dirs, &w.cwd);
    let text = match ctx.format {
        Format::Json => {
            json_out::print(&prompts)?;
            return Ok(Outcome::Success);
        }
        Format::Quiet => prompts
            .iter()
            .map(|p| format!("{}\n", crate::style::printable(&p.name)))
            .collect(),
        _ if prompts.is_empty() => {
            if ctx.quiet {
                return Ok(Outcome::Success);
            }
            let mut s = "No prompts found\nSearch paths:\n".to_owned();
            for (d, source) in &dirs {
                s.push_str(&format!("  - {} ({source})\n", d.display()));
            }
            s.push_str("Run 'awf init' to create the prompts directory\n");
            s
        }
        Format::Table => {
            let mut t = crate::table::Table::new(&[30, 8, 10, 19]);
            t.header(&["NAME", "SOURCE", "SIZE", "MODIFIED"]);
            for p in &prompts {
                t.row(&[
                    p.name.clone(),
                    p.source.clone(),
                    format!("{} B", p.size),
                    p.mod_time.clone().unwrap_or_default(),
                ]);
            }
            t.sep();
            t.text().to_owned()
        }
        Format::Text => render_prompts(&prompts),
    };
    crate::stdout_check::checked(std::io::stdout().lock().write_all(text.as_bytes()));
    Ok(Outcome::Success)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Many items are done side by side (when there are CPUs for it) and come back in
    /// order; a few stay on the calling thread.
    #[test]
    fn side_by_side_keeps_the_order_and_starts_threads_only_for_many_items() {
        let here = std::thread::current().id();
        let items: Vec<usize> = (0..100).collect();
        let got = side_by_side(items, |i| (i * 2, std::thread::current().id()));
        assert_eq!(
            got.iter().map(|(v, _)| *v).collect::<Vec<_>>(),
            (0..100).map(|i| i * 2).collect::<Vec<_>>()
        );
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let threads: std::collections::HashSet<_> = got.iter().map(|(_, t)| *t).collect();
        assert_eq!(threads.len(), cpus.clamp(1, 8), "{threads:?}");
        let few = side_by_side(vec![1, 2, 3], |i| (i, std::thread::current().id()));
        assert!(few.iter().all(|(_, t)| *t == here));
        assert_eq!(
            few.iter().map(|(v, _)| *v).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert!(side_by_side(Vec::<u8>::new(), |i| i).is_empty());
    }

    #[test]
    fn table_is_aligned() {
        let e = |n: &str, v: Option<&str>, d: Option<&str>| WorkflowEntry {
            name: n.into(),
            source: "local".into(),
            path: PathBuf::from(format!("/w/{n}.yaml")),
            version: v.map(Into::into),
            description: d.map(Into::into),
            error: None,
        };
        assert_eq!(
            render_table(&[
                e("a", Some("1.0.0"), Some("First\nmore")),
                e("longer-name", None, None)
            ]),
            "NAME         SOURCE  VERSION  DESCRIPTION\na            local   1.0.0    First\nlonger-name  local\n"
        );
    }

    #[test]
    fn prompts_are_found_recursively_first_directory_winning() {
        let tmp = tempfile::tempdir().unwrap();
        let env_dir = tmp.path().join("env");
        let local = tmp.path().join(".awf/prompts");
        std::fs::create_dir_all(env_dir.join("sub")).unwrap();
        std::fs::create_dir_all(&local).unwrap();
        std::fs::write(env_dir.join("sub/a.md"), "abc").unwrap();
        std::fs::write(env_dir.join("same.txt"), "env").unwrap();
        std::fs::write(local.join("same.txt"), "local one").unwrap();
        std::fs::write(local.join("z.md"), "z").unwrap();
        let dirs = vec![
            (env_dir, "env"),
            (PathBuf::from(".awf/prompts"), "local"),
            (tmp.path().join("missing"), "global"),
        ];
        let got = collect_prompts(&dirs, tmp.path());
        let names: Vec<(&str, &str, u64)> = got
            .iter()
            .map(|p| (p.source.as_str(), p.name.as_str(), p.size))
            .collect();
        assert_eq!(
            names,
            vec![
                ("env", "same.txt", 3),
                ("env", "sub/a.md", 3),
                ("local", "z.md", 1)
            ]
        );
        assert_eq!(got[2].path, ".awf/prompts/z.md");
        assert_eq!(got[2].mod_time.as_ref().map(String::len), Some(19));
    }

    #[test]
    fn broken_entries_are_marked() {
        let e = WorkflowEntry {
            name: "bad".into(),
            source: "local".into(),
            path: PathBuf::from("/w/bad.yaml"),
            version: None,
            description: Some("would be shown".into()),
            error: Some("[WORKFLOW.PARSE.YAML_SYNTAX] bad indentation\nmore".into()),
        };
        assert_eq!(
            render_table(&[e]),
            "NAME  SOURCE  VERSION  DESCRIPTION\nbad   local            BROKEN: [WORKFLOW.PARSE.YAML_SYNTAX] bad indentation\n"
        );
    }
}
