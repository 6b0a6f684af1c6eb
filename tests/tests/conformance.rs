//! AWF's own workflow files with the results they must give (../shared/conformance), run
//! against the built binary by the shared runner. A missing shared folder fails the test.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Command;

#[test]
fn shared_conformance_suite_passes() {
    let runner = awf_tests::shared_dir().join("conformance").join("run.py");
    assert!(
        runner.exists(),
        "conformance runner not found at {} (the shared folder must sit next to the workspace)",
        runner.display()
    );
    let bin = awf_tests::awf_bin();
    assert!(
        bin.exists(),
        "build the binary first: cargo build -p awf ({})",
        bin.display()
    );
    let out = Command::new("python3")
        .arg(&runner)
        .arg("--awf")
        .arg(&bin)
        .arg("--verbose")
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stdout.lines().last().unwrap_or_default().to_owned();
    assert!(
        out.status.success() && last.ends_with(" 0 failed"),
        "conformance failed: {last}\n{stdout}\n{stderr}"
    );
}
