//! `awf serve --token-env NAME`: the token out of the server's environment block.
//!
//! Removing a variable from a running process's environment does not remove it from
//! `/proc/PID/environ`, which shows the block the process was started with; a step (a child
//! of the server, same user) could read the token there (`/proc/$PPID/environ`). So when
//! the variable is set, `awf serve` reads the token, then starts itself again in place
//! (`exec` of `/proc/self/exe`, the same arguments and process id) without the variable;
//! the token goes over an inherited pipe whose descriptor number (with the process id, so
//! a later `awf serve` a step starts ignores it) is in [`FD_VAR`]. The new image reads it
//! there ([`take`]) and closes the pipe. Where that cannot be done (no `/proc/self/exe`),
//! the server goes on as before: the variable is withheld from the runs' processes.

use std::ffi::OsString;
use std::io::Read;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::sync::OnceLock;

/// The private variable that names the pipe: `FD:PID`.
pub const FD_VAR: &str = "AWF_SERVE_TOKEN_FD";

/// Longest token handed over (a pipe's buffer holds it whole; a request head is at most
/// 16 KiB, so a longer token could never be sent anyway).
const MAX_HANDED: usize = 16 * 1024;

/// The token the earlier image handed over, once read.
static HANDED: OnceLock<String> = OnceLock::new();

/// The token handed over through [`FD_VAR`], read once (`None` when none was).
pub fn handed() -> Option<&'static str> {
    HANDED.get().map(String::as_str)
}

/// Reads the token handed over by the earlier image, if this process is that image's
/// re-execution: [`FD_VAR`] names a descriptor and this process's id. Closes the pipe.
pub fn take() {
    let Some(v) = std::env::var_os(FD_VAR) else {
        return;
    };
    let Some((fd, pid)) = v.to_str().and_then(|s| s.split_once(':')) else {
        return;
    };
    let (Ok(fd), Ok(pid)) = (fd.parse::<i32>(), pid.parse::<u32>()) else {
        return;
    };
    if pid != std::process::id() || fd < 3 {
        return;
    }
    let mut token = String::new();
    let read = std::fs::File::open(format!("/proc/self/fd/{fd}"))
        .and_then(|f| f.take(MAX_HANDED as u64 + 1).read_to_string(&mut token));
    // The inherited descriptor is not left to the runs' processes.
    let _ = nix::unistd::close(fd);
    if read.is_ok() && !token.is_empty() {
        let _ = HANDED.set(token);
    }
}

/// When `name` is set in the environment and no token was handed over yet: starts this
/// binary again in place without `name`, the token on a pipe. Returns only when that could
/// not be done (then the caller goes on with the variable withheld from the runs).
pub fn reexec_without(name: &str, args: &[OsString]) {
    if handed().is_some() {
        return;
    }
    let Some(token) = std::env::var_os(name) else {
        return;
    };
    if token.is_empty() || token.len() > MAX_HANDED {
        // Refused or reported by the server's own checks.
        return;
    }
    let Ok((r, w)) = nix::unistd::pipe() else {
        return;
    };
    {
        let mut w = std::fs::File::from(w);
        if w.write_all(token.as_encoded_bytes()).is_err() {
            return;
        }
    }
    let Some(argv0) = args.first() else {
        return;
    };
    let err = std::process::Command::new("/proc/self/exe")
        .arg0(argv0)
        .args(&args[1..])
        .env_remove(name)
        .env(FD_VAR, format!("{}:{}", r.as_raw_fd(), std::process::id()))
        .exec();
    let _ = writeln!(
        std::io::stderr().lock(),
        "WARN awf serve: could not start again without {name} in its environment ({err}); the variable is withheld from the runs"
    );
    drop(r);
}
