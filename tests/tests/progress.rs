//! Live progress of `awf run` under a real pseudo-terminal (rexpect): spinners for the
//! running steps of a parallel block, each replaced by its final line; plain lines when
//! `NO_COLOR` (or `--no-color`, trial_fixes_41) turns the live display off.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;

const TIMEOUT_MS: u64 = 20_000;

/// The spinner frames awf draws.
const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// rexpect hands back each byte as one char: rebuild the UTF-8 text the terminal got.
fn utf8(latin1: &str) -> String {
    let bytes: Vec<u8> = latin1
        .chars()
        .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn spun(text: &str, step: &str) -> bool {
    FRAMES
        .iter()
        .any(|f| text.contains(&format!("{f} {step}  ")))
}

#[test]
fn parallel_branches_spin_side_by_side_and_end_as_final_lines() {
    let sb = Sandbox::new().unwrap();
    // The live display is on with colours (`--no-color` turns both off, as NO_COLOR does):
    // the colour codes are left out of what is compared.
    let mut cmd = sb.tty_cmd(&["run", "progress-parallel"]);
    cmd.env_remove("NO_COLOR").env("TERM", "xterm");
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    let shown = awf_tests::strip_ansi(&utf8(&p.exp_string("Workflow completed.").unwrap()));
    p.exp_eof().unwrap();

    assert!(spun(&shown, "both"), "{shown:?}");
    assert!(spun(&shown, "left"), "{shown:?}");
    assert!(spun(&shown, "right"), "{shown:?}");
    let left = shown.find("  ✓ left (").expect("final line of left");
    let right = shown.find("  ✓ right (").expect("final line of right");
    let both = shown.find("  ✓ both (").expect("final line of the block");
    assert!(both > left && both > right, "{shown:?}");
    assert!(!shown.contains('→'), "{shown:?}");
}

#[test]
fn without_the_live_display_the_plain_lines_stay() {
    // The sandbox sets NO_COLOR=1: a terminal then gets today's plain lines.
    let sb = Sandbox::new().unwrap();
    let cmd = sb.tty_cmd(&["run", "progress-parallel"]);
    let mut p = rexpect::session::spawn_command(cmd, Some(TIMEOUT_MS)).unwrap();
    let shown = utf8(&p.exp_string("Workflow completed.").unwrap());
    p.exp_eof().unwrap();

    for line in [
        "  → both",
        "  → left",
        "  → right",
        "  ✓ left (",
        "  ✓ both (",
    ] {
        assert!(shown.contains(line), "{line}: {shown:?}");
    }
    assert!(!spun(&shown, "left"), "{shown:?}");
}
