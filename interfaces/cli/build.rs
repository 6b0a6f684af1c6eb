//! Links the `awf` executable as a non-PIE (position-dependent) executable on Linux (issues 9,
//! 11, 12: start-up time and RSS).
//!
//! A position-independent executable carries one dynamic relocation per pointer in its
//! constant data (about 34,000 for awf: an 800 KiB `.rela.dyn`), which the dynamic loader
//! applies at every start (about 30 % of the instructions of `awf --version`) by writing the
//! 560 KiB `.data.rel.ro`, which then stays as private dirty memory in every awf process.
//! Linked at a fixed address, those pointers are resolved by the linker: nothing to relocate,
//! and the constant data stays clean, shared page cache.
//!
//! The code itself is still compiled position-independent (rustc's default), so only the
//! link changes. Trade-off: the executable's own code and data sit at a fixed address (the
//! shared libraries, the heap and the stacks stay randomised), which makes addresses in the
//! executable known to an attacker who already has a memory-safety bug to exploit; Go
//! builds its binaries (AWF (Go) included) this way by default. `AWF_PIE=1` at build time
//! keeps the PIE link.
fn main() {
    println!("cargo::rerun-if-env-changed=AWF_PIE");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let pie = std::env::var("AWF_PIE").is_ok_and(|v| v == "1");
    if os == "linux" && env == "gnu" && !pie {
        println!("cargo::rustc-link-arg-bins=-no-pie");
    }
}
