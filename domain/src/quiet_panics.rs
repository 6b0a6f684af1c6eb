//! Panics a caller catches and turns into an error: the process's panic hook (the `awf`
//! binary's crash report) stays silent for them.
//!
//! A library that panics where it should fail (gtmpl-ng's `thread::spawn` when the OS refuses
//! a thread) is called through [`quietly`] inside `catch_unwind`; the hook asks
//! [`is_quiet`] before printing. Per thread: the panic runs its hook on the thread that
//! panicked.

use std::cell::Cell;

thread_local! {
    static QUIET: Cell<u32> = const { Cell::new(0) };
}

/// Runs `f` with this thread's panics marked as caught by the caller (see [`is_quiet`]).
/// Nests; the mark is lifted when `f` returns or unwinds.
pub fn quietly<T>(f: impl FnOnce() -> T) -> T {
    struct Lift;
    impl Drop for Lift {
        fn drop(&mut self) {
            QUIET.with(|q| q.set(q.get().saturating_sub(1)));
        }
    }
    QUIET.with(|q| q.set(q.get() + 1));
    let _lift = Lift;
    f()
}

/// Whether a panic on this thread now happens inside [`quietly`] (its caller catches it).
pub fn is_quiet() -> bool {
    QUIET.with(Cell::get) > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_holds_inside_and_is_lifted_after_an_unwind() {
        assert!(!is_quiet());
        assert!(quietly(is_quiet));
        let caught = std::panic::catch_unwind(|| quietly(|| panic!("inside")));
        assert!(caught.is_err());
        assert!(!is_quiet());
    }
}
