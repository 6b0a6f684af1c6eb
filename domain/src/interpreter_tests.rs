//! Unit tests of the `#!` reading of `script_file:` scripts.

use super::*;

/// Scripts without `#!` and those for a shell are shell text; others are not (new user:
/// `shell_quote: true` left a `script_file:`'s values unquoted).
#[test]
fn scripts_for_a_shell_are_told_from_scripts_for_other_interpreters() {
    for shell in [
        "echo hi",
        "",
        "#!/bin/sh\necho hi",
        "#!/bin/bash -e\n",
        "#! /usr/bin/env bash\n",
        "#!/usr/bin/env -S bash -eu\n",
        "#!/usr/bin/env LC_ALL=C dash\n",
        "#!/usr/local/bin/zsh",
    ] {
        assert!(script_interpreter(shell).quotes_as_shell(), "{shell:?}");
    }
    for other in [
        "#!/usr/bin/env python3\nprint(1)",
        "#!/usr/bin/node\n",
        "#!/usr/bin/env -S node --no-warnings\n",
        "#!/usr/bin/perl -w\n",
    ] {
        assert!(!script_interpreter(other).quotes_as_shell(), "{other:?}");
    }
}

/// Breaker, second round: `env` options before the program hid a shell (`-S -u X bash`,
/// `-S -C /tmp bash`, `-Sbash`), so `shell_quote: true` left the values raw. Options are
/// read as GNU `env` reads them; an unknown one (or no program) counts as shell.
#[test]
fn env_options_before_the_program_are_read_as_env_reads_them() {
    for shell in [
        "#!/usr/bin/env -S -u X bash\n",
        "#!/usr/bin/env -S -C /tmp bash\n",
        "#!/usr/bin/env -Sbash\n",
        "#!/usr/bin/env -S -uX -C/tmp bash -e\n",
        "#!/usr/bin/env --split-string=bash\n",
        "#!/usr/bin/env --unset X --chdir /tmp -i -0 -v - A=1 sh\n",
        "#!/usr/bin/env -iv -- bash\n",
        "#!/usr/bin/env -S \"bash\" -e\n",
        "#!/usr/bin/env --frobnicate python3\n",
        "#!/usr/bin/env -Z python3\n",
        "#!/usr/bin/env -S ${SHELL}\n",
        "#!/usr/bin/env\n",
    ] {
        assert!(script_interpreter(shell).quotes_as_shell(), "{shell:?}");
    }
    for other in [
        "#!/usr/bin/env -S -u X python3\n",
        "#!/usr/bin/env -S -C /tmp node\n",
        "#!/usr/bin/env -Spython3\n",
        "#!/usr/bin/env --chdir=/tmp -- perl\n",
    ] {
        assert!(!script_interpreter(other).quotes_as_shell(), "{other:?}");
    }
}

/// Breaker (h4): `#!/bin/rbash`, `#!/usr/bin/nice bash`, `#!/usr/bin/env -S nice bash`,
/// `#!/bin/bash5` and `#!/usr/bin/fish` scripts were filled in unquoted under
/// `shell_quote: true`. Wrappers are looked through, version suffixes dropped, an unknown
/// interpreter counts as shell, a non-POSIX shell is told apart.
#[test]
fn script_interpreters_are_read_through_wrappers_and_unknown_ones_count_as_shell() {
    use ScriptInterpreter::*;
    let of = |s: &str| script_interpreter(&format!("{s}\necho hi\n"));
    for shell in [
        "#!/bin/rbash",
        "#!/bin/bash5",
        "#!/usr/bin/bash-5.2 -e",
        "#!/bin/ksh93",
        "#!/bin/mksh",
        "#!/usr/bin/yash",
        "#!/bin/posh",
        "#!/bin/ash",
        "#!/bin/busybox sh",
        "#!/bin/busybox ash",
        "#!/usr/bin/nice bash",
        "#!/usr/bin/nice -n 5 bash",
        "#!/usr/bin/nice -n5 bash",
        "#!/usr/bin/nice -10 sh",
        "#!/usr/bin/nice --adjustment=3 bash",
        "#!/usr/bin/nohup bash",
        "#!/usr/bin/nohup -- bash",
        "#!/usr/bin/setsid bash",
        "#!/usr/bin/setsid -fw bash",
        "#!/usr/bin/env -S nice bash",
        "#!/usr/bin/env -S timeout -s KILL 10 bash -e",
        "#!/usr/bin/timeout --kill-after 5 10s sh",
        "#!/usr/bin/timeout --foreground -k5 10 sh",
        "#!/usr/bin/stdbuf -oL -e 0 bash",
        "#!/usr/bin/ionice -c 3 -t bash",
        "#!/usr/bin/chrt -f 10 bash",
        "#!/usr/bin/taskset -c 0,1 bash",
        "#!/usr/bin/time -p bash",
        "#!/usr/bin/flock -w 5 /tmp/lock bash",
        "#!/usr/bin/sudo -u root -E bash",
        "#!/usr/bin/doas -u root sh",
        "#!/usr/bin/env nice nohup setsid bash",
        "echo no shebang",
    ] {
        assert_eq!(of(shell), Shell, "{shell}");
    }
    for (other_shell, name) in [
        ("#!/usr/bin/fish", "fish"),
        ("#!/usr/bin/env fish", "fish"),
        ("#!/bin/csh -f", "csh"),
        ("#!/usr/bin/nice tcsh", "tcsh"),
        ("#!/usr/bin/env -S pwsh -NoProfile", "pwsh"),
    ] {
        assert_eq!(
            of(other_shell),
            OtherShell(name.to_owned()),
            "{other_shell}"
        );
    }
    for (other, name) in [
        ("#!/usr/bin/nice python3", "python3"),
        ("#!/usr/bin/env -S nice -n 5 python3.12 -u", "python3.12"),
        ("#!/usr/bin/timeout 10 node", "node"),
        ("#!/bin/busybox awk -f", "awk"),
        ("#!/usr/bin/env -S uv run --script", "uv"),
        ("#!/usr/bin/perl -w", "perl"),
    ] {
        assert_eq!(of(other), Other(name.to_owned()), "{other}");
    }
    for (unknown, what) in [
        ("#!/usr/bin/frob", "the program \"frob\""),
        ("#!/usr/bin/nice -Z bash", "nice options"),
        ("#!/usr/bin/nice", "nice options"),
        ("#!/usr/bin/ionice -p 1 bash", "ionice options"),
        ("#!/usr/bin/timeout bash", "timeout options"),
        ("#!/usr/bin/sudo -s", "sudo options"),
        ("#!/bin/busybox", "busybox options"),
        ("#!/usr/bin/env -Z bash", "env options"),
        ("#!$SHELL", "the program \"$SHELL\""),
        ("#!", "naming no program"),
    ] {
        match of(unknown) {
            Unknown(w) => assert!(w.contains(what), "{unknown}: {w}"),
            other => panic!("{unknown}: {other:?}"),
        }
        assert!(of(unknown).quotes_as_shell(), "{unknown}");
    }
    assert!(!of("#!/usr/bin/fish").quotes_as_shell());
    assert!(!of("#!/usr/bin/env python3").quotes_as_shell());
}

/// Only a non-POSIX shell's script that prints a value is refused under the mode.
#[test]
fn a_non_posix_shell_script_is_refused_only_when_it_prints_a_value() {
    let fish = ScriptInterpreter::OtherShell("fish".to_owned());
    assert!(
        fish.shell_quote_refusal("#!/usr/bin/fish\necho {{.inputs.x}}\n")
            .is_some_and(
                |(why, hint)| why.contains("cannot quote template values for fish")
                    && hint.contains("$name in fish")
            )
    );
    assert!(
        fish.shell_quote_refusal("#!/usr/bin/fish\necho {{shell_quote .inputs.x}}\n")
            .is_some()
    );
    for quiet in [
        "#!/usr/bin/fish\necho hi\n",
        "#!/usr/bin/fish\n{{if .inputs.x}}echo x{{end}}\n",
        "#!/usr/bin/fish\n{{/* note */}}echo x\n",
    ] {
        assert_eq!(fish.shell_quote_refusal(quiet), None, "{quiet}");
    }
    assert_eq!(
        ScriptInterpreter::Shell.shell_quote_refusal("echo {{.inputs.x}}"),
        None
    );
}

/// `$SHELL` values: the POSIX family by base name, versioned or not; everything else is not
/// one (trial: `SHELL=/usr/bin/tclsh` ran no command and the step "succeeded").
#[test]
fn a_shell_is_posix_by_its_base_name() {
    for posix in [
        "/bin/sh",
        "/bin/bash",
        "/usr/local/bin/bash5",
        "/opt/bash-5.2",
        "dash",
        "/bin/zsh",
        "/bin/ksh",
        "/usr/bin/ksh93",
        "/bin/mksh",
        "/bin/ash",
        "/usr/bin/yash",
        "/usr/bin/posh",
        "/bin/busybox",
        "/usr/bin/loksh",
        "/usr/bin/oksh",
        "/bin/rbash",
    ] {
        assert!(is_posix_shell(posix), "{posix}");
    }
    for other in [
        "/usr/bin/fish",
        "/bin/csh",
        "/bin/tcsh",
        "/usr/bin/tclsh",
        "/usr/bin/tclsh8.6",
        "/usr/bin/pwsh",
        "/usr/bin/nu",
        "/usr/bin/xonsh",
        "/usr/bin/elvish",
        "/usr/bin/python3",
        "/usr/bin/frob",
        "",
        "/",
        "/bin/bashful",
    ] {
        assert!(!is_posix_shell(other), "{other}");
    }
}
