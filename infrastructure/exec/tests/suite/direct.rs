//! Commands with no shell syntax are exec'd directly (issue 9); their output and exit status
//! are the same as through `$SHELL -c`. Each command runs both ways: once as a step runs it
//! (`Program::Shell`, which takes the direct path), once forced through the shell; a `SHELL`
//! that leaves a marker tells which path was taken.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use awf_domain::ports::exec::CommandOutput;
use awf_domain::ports::exec::CommandSpec;
use awf_domain::ports::exec::Program;
use pretty_assertions::assert_eq;

use crate::common::run_ok;
use crate::common::shell;

/// A `SHELL` that appends its argv to `marker`, then runs the real shell.
fn marking_shell(dir: &Path, real: &str) -> String {
    // Named as a POSIX shell: `$SHELL` is used only when it is one.
    let p = dir.join("sh");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{}'\nexec {real} \"$@\"\n",
            dir.join("marker").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p.display().to_string()
}

fn with_shell(text: &str, shell_path: &str) -> CommandSpec {
    let mut s = shell(text);
    s.env.push(("SHELL".into(), shell_path.into()));
    s
}

fn through(real: &str, text: &str) -> CommandSpec {
    CommandSpec {
        program: Program::Exec {
            program: real.into(),
            args: vec!["-c".into(), text.into()],
        },
        ..shell("")
    }
}

fn same(a: &CommandOutput, b: &CommandOutput, text: &str) {
    assert_eq!(
        (&a.stdout, &a.stderr, a.exit_code, a.signal),
        (&b.stdout, &b.stderr, b.exit_code, b.signal),
        "{text:?}"
    );
}

/// Commands that take the direct path, with what they print and how they exit.
const DIRECT: &[&str] = &[
    "true",
    "false",
    "ls /nonexistent-awf-direct",
    "cat /nonexistent-awf-direct",
    "env -u AWF_NOPE true",
    "sh -c 'exit 7'",
    "seq 3",
    "head -c 4 /etc/hostname",
    "grep -c root /etc/passwd",
    "date -u -d @0 +%Y",
    "wc -c /etc/hostname",
    "expr 2 + 3",
    "expr 1 = 2",
    "sh -c 'echo out; echo err >&2'",
    "stat --format=%n /",
    "sh -c \"printf '%s' 'x y'\"",
    "uname -s",
    "basename /a/b.txt .txt",
];

/// Commands that need the shell (syntax, builtins, not found), run the shell's way.
const SHELLED: &[&str] = &[
    "echo hi",
    "cd / && pwd",
    "no-such-program-awf-direct x",
    "A=1 sh -c 'echo $A'",
    "echo $((1+2))",
    "ls /nonexistent-awf-direct 2>&1",
    "exit 4",
    "printf '%s\\n' a b",
    "true | false",
];

#[tokio::test]
async fn simple_commands_run_without_a_shell_and_print_the_same() {
    for real in ["/bin/sh", "/bin/bash"] {
        if !Path::new(real).exists() {
            continue;
        }
        for text in DIRECT {
            let dir = tempfile::tempdir().unwrap();
            let marking = marking_shell(dir.path(), real);
            let direct = run_ok(with_shell(text, &marking)).await;
            assert!(
                !dir.path().join("marker").exists(),
                "{text:?} went through the shell"
            );
            let shelled = run_ok(through(real, text)).await;
            same(&direct, &shelled, text);
        }
    }
}

#[tokio::test]
async fn commands_with_shell_syntax_or_builtins_still_use_the_shell() {
    for real in ["/bin/sh", "/bin/bash"] {
        if !Path::new(real).exists() {
            continue;
        }
        for text in SHELLED {
            let dir = tempfile::tempdir().unwrap();
            let marking = marking_shell(dir.path(), real);
            let out = run_ok(with_shell(text, &marking)).await;
            let marker = std::fs::read_to_string(dir.path().join("marker")).unwrap_or_default();
            assert!(marker.contains(text), "{text:?} did not use the shell");
            let shelled = run_ok(through(real, text)).await;
            // The marking shell is a script, so the shell's name in messages differs; compare
            // status and stdout.
            assert_eq!(
                (&out.stdout, out.exit_code),
                (&shelled.stdout, shelled.exit_code),
                "{text:?}"
            );
        }
    }
}

/// A program killed by a signal is reported as killed by it, as bash reports the command it
/// exec'd (dash waits instead and exits 128+n; see docs/compatibility.md).
#[tokio::test]
async fn a_signal_death_is_reported_as_bash_does() {
    let text = "sh -c 'kill -TERM $$'";
    let direct = run_ok(shell(text)).await;
    assert_eq!((direct.exit_code, direct.signal), (-1, Some(15)));
    if Path::new("/bin/bash").exists() {
        same(&direct, &run_ok(through("/bin/bash", text)).await, text);
    }
}

/// A program the command names is found on the step's own `PATH` (its `env:`), and argv[0]
/// is the word as written, as a shell passes it.
#[tokio::test]
async fn direct_commands_use_the_steps_path_and_argv0() {
    let dir = tempfile::tempdir().unwrap();
    let tool = dir.path().join("awf-direct-tool");
    std::fs::write(&tool, "#!/bin/sh\necho \"$0|$1\"\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut spec = shell("awf-direct-tool 'a b'");
    spec.env.push((
        "PATH".into(),
        format!("{}:/usr/bin:/bin", dir.path().display()),
    ));
    let out = run_ok(spec).await;
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
    // A shebang script sees its path as $0; what matters is that it was found and got the
    // quoted argument whole.
    assert_eq!(out.stdout, format!("{}|a b\n", tool.display()));
}

/// A program the direct path cannot exec (a file without `#!`, an empty file, a `#!` naming
/// a missing interpreter, a broken executable) runs through the shell after all, so the
/// status and output are the shell's: `sh` runs a file without `#!` as a script, 127 for a
/// missing interpreter, 126 for a file it cannot execute (a breaker saw "cannot start …: Exec
/// format error" and no exit code instead).
#[tokio::test]
async fn a_program_that_cannot_be_execed_runs_through_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    // (A broken ELF file only has to fail with a status: glibc's posix_spawn runs a file
    // the kernel refuses through `/bin/sh` itself, where dash's own exec says 126.)
    let files: &[(&str, &[u8], &str, Option<i32>)] = &[
        ("nosheb", b"echo noshebang\n", "noshebang\n", Some(0)),
        ("emptyexec", b"", "", Some(0)),
        (
            "badinterp",
            b"#!/nonexistent/awf-interp\necho no\n",
            "",
            Some(127),
        ),
        ("badelf", b"\x7fELF\x02\x01\x01garbage", "", None),
    ];
    for (name, body, stdout, code) in files {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        let text = p.display().to_string();
        let out = run_ok(with_shell(&text, "/bin/sh")).await;
        assert_eq!(out.stdout, *stdout, "{name}: {}", out.stderr);
        if let Some(code) = code {
            assert_eq!(out.exit_code, *code, "{name}: {}", out.stderr);
        } else {
            assert!(out.exit_code > 0, "{name}: {}", out.stderr);
        }
        if code.is_some() {
            let shelled = run_ok(through("/bin/sh", &text)).await;
            same(&out, &shelled, name);
        }
    }
}

/// A command exec'd directly in a step's `dir:` sees `PWD` set to that directory, as a shell
/// would set it (it saw awf's own directory).
#[tokio::test]
async fn a_direct_command_in_a_directory_sees_it_as_pwd() {
    let dir = tempfile::tempdir().unwrap();
    let real = std::fs::canonicalize(dir.path()).unwrap();
    let mut spec = shell("printenv PWD");
    spec.dir = Some(real.clone());
    let out = run_ok(spec).await;
    assert_eq!(out.stdout, format!("{}\n", real.display()));
    let mut spec = shell("printenv PWD;");
    spec.dir = Some(real.clone());
    let shelled = run_ok(spec).await;
    assert_eq!(out.stdout, shelled.stdout);
    // `.` and `..` resolved as a shell's `cd` would (it showed `…/sub/../sub`).
    std::fs::create_dir(real.join("sub")).unwrap();
    let mut spec = shell("printenv PWD");
    spec.dir = Some(real.join("sub/./../sub/"));
    let out = run_ok(spec).await;
    assert_eq!(out.stdout, format!("{}\n", real.join("sub").display()));
}

/// A directory given through a symbolic link is the child's `PWD` as spelled, through the
/// shell as when exec'd directly (the shell took the physical path: a resumed run's steps
/// saw `$PWD` differ from `{{.context.WorkingDir}}`).
#[tokio::test]
async fn a_directory_given_through_a_symlink_is_pwd_as_spelled() {
    let dir = tempfile::tempdir().unwrap();
    let real = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir(real.join("real")).unwrap();
    let link = real.join("link");
    std::os::unix::fs::symlink(real.join("real"), &link).unwrap();
    for text in ["printenv PWD", "echo \"$PWD\"; cd . && pwd"] {
        let mut spec = shell(text);
        spec.dir = Some(link.clone());
        let out = run_ok(spec).await;
        assert_eq!(
            out.stdout.lines().next(),
            Some(link.to_str().unwrap()),
            "{text}: {}",
            out.stdout
        );
    }
}
