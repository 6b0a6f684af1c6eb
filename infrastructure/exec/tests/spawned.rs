//! The integration suite of `all.rs` again, with a watchdog registered as the `awf` binary
//! does: no parent-death signal is set, so children are started by `posix_spawn` with the
//! environment built once (awf-exec's `spawn` module), and every behaviour the suite checks
//! must hold there too.

#[cfg(test)]
mod common;
#[cfg(test)]
mod suite;

/// Registers a stand-in watchdog once per test process: a `cat` child reading a pipe that
/// this process holds open, so it exits with the test process.
#[cfg(test)]
fn prepare() {
    use std::process::Child;
    use std::process::Command;
    use std::process::Stdio;
    use std::sync::OnceLock;

    static WATCHDOG: OnceLock<Child> = OnceLock::new();
    let child = WATCHDOG.get_or_init(|| {
        Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the stand-in watchdog")
    });
    awf_exec::set_watchdog(i32::try_from(child.id()).expect("pid"));
}

/// What a child sees does not depend on how it was started: started by awf-exec's own
/// `posix_spawn` it sees what std's `Command` gave it on the same path (a watchdog running,
/// so no parent-death signal; a working directory set, which sends the spawn through std):
/// the same environment, in the same order (std's sorted one, the tag in its place, an
/// added variable, an override), the same ignored and blocked signals (SIGPIPE back to its
/// default), its own process group, stdin on /dev/null.
#[cfg(test)]
#[tokio::test]
async fn posix_spawn_and_std_command_give_the_child_the_same_world() {
    use awf_domain::ports::exec::CommandExecutor;
    use awf_domain::ports::exec::CommandSpec;
    use awf_domain::ports::exec::Program;
    use pretty_assertions::assert_eq;

    /// `program args`, with an added and an overriding variable, the stand-in watchdog
    /// running; with `dir` (the current one), the child is started by std's `Command`.
    async fn probe(dir: bool, program: &str, args: &[&str]) -> String {
        prepare();
        let spec = CommandSpec {
            program: Program::Exec {
                program: program.to_owned(),
                args: args.iter().map(|a| (*a).to_owned()).collect(),
            },
            env: vec![
                ("AWF_SPAWN_TEST_ADDED".to_owned(), "added value".to_owned()),
                ("HOME".to_owned(), "/overridden/home".to_owned()),
            ],
            dir: dir.then(|| std::env::current_dir().expect("cwd")),
            ..common::shell("")
        };
        let out = awf_exec::ProcessExecutor::new()
            .run(spec, None, tokio_util::sync::CancellationToken::new())
            .await
            .expect("the probe starts");
        assert_eq!((out.exit_code, out.stderr.as_str()), (0, ""), "{program}");
        out.stdout
    }
    async fn world(dir: bool) -> (Vec<String>, String, String) {
        let env = probe(dir, "/usr/bin/env", &[]).await;
        let signals = probe(
            dir,
            "/bin/grep",
            &["-E", "^Sig(Ign|Blk)", "/proc/self/status"],
        )
        .await;
        let status = probe(
            dir,
            "/bin/sh",
            &["-c", "ps -o pgid= -p $$; echo $$; readlink /proc/self/fd/0"],
        )
        .await;
        let env = env
            .lines()
            .map(|l| match l.split_once('=') {
                Some((awf_exec::TAG_VAR, _)) => format!("{}=<tag>", awf_exec::TAG_VAR),
                _ => l.to_owned(),
            })
            .collect();
        let lines: Vec<&str> = status.lines().collect();
        // pgid == pid: a group of its own (the pid itself differs between runs).
        assert_eq!(
            lines.first().map(|l| l.trim()),
            lines.get(1).copied(),
            "{lines:?}"
        );
        (env, signals, lines.get(2).copied().unwrap_or("").to_owned())
    }

    let std_spawned = world(true).await;
    let spawned = world(false).await;
    assert_eq!(std_spawned, spawned);
    for wanted in [
        "AWF_SPAWN_TEST_ADDED=added value",
        "HOME=/overridden/home",
        "AWF_PROCESS_TAG=<tag>",
    ] {
        assert!(
            spawned.0.iter().any(|l| l == wanted),
            "{wanted}: {:?}",
            spawned.0
        );
    }
    assert!(spawned.1.starts_with("SigBlk:"), "{}", spawned.1);
    assert_eq!(spawned.2, "/dev/null");
}
