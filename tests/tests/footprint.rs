//! awf's footprint (issues 9, 11, 12: start-up time and RSS), checked by what is fixed in
//! the executable and by what awf prints, never by time: the executable is linked at a fixed
//! address (no load-time relocation of its constant data, which would be copied into every
//! awf process), and the short paths taken to start faster print what the long ones print.
//! The figures themselves are in the benchmarks (benches/peers.py, mcp.py, acp.py).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use awf_tests::Sandbox;
use awf_tests::awf_bin;

/// `e_type` of an ELF file (`ET_EXEC` = 2, `ET_DYN` = 3), read from its header.
fn elf_type(bytes: &[u8]) -> u16 {
    assert_eq!(&bytes[..4], b"\x7fELF", "an ELF file");
    assert_eq!(bytes[5], 1, "little-endian");
    u16::from_le_bytes([bytes[16], bytes[17]])
}

/// The number of entries of the section named `name` (its size over its entry size), or 0
/// when there is none. 64-bit little-endian ELF only.
fn section_entries(bytes: &[u8], name: &str) -> u64 {
    let u16_at = |o: usize| u64::from(u16::from_le_bytes([bytes[o], bytes[o + 1]]));
    let u32_at = |o: usize| u64::from(u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap()));
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    assert_eq!(bytes[4], 2, "a 64-bit ELF file");
    let shoff = u64_at(0x28) as usize;
    let (shentsize, shnum, shstrndx) = (u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: u64| shoff + (i * shentsize) as usize;
    let strtab = u64_at(header(shstrndx) + 0x18) as usize;
    (0..shnum)
        .find(|&i| {
            let at = strtab + u32_at(header(i)) as usize;
            let end = at + bytes[at..].iter().position(|&b| b == 0).unwrap();
            &bytes[at..end] == name.as_bytes()
        })
        .map_or(0, |i| {
            let size = u64_at(header(i) + 0x20);
            let entsize = u64_at(header(i) + 0x38);
            size.checked_div(entsize).unwrap_or(0)
        })
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn the_executable_is_linked_at_a_fixed_address_with_almost_no_load_time_relocations() {
    let bytes = std::fs::read(awf_bin()).unwrap();
    // A position-independent executable (ET_DYN) has one relocation per pointer in its
    // constant data (tens of thousands), applied at every start into private memory.
    assert_eq!(
        elf_type(&bytes),
        2,
        "awf is linked as ET_EXEC (interfaces/cli/build.rs)"
    );
    let relocations = section_entries(&bytes, ".rela.dyn");
    assert!(
        relocations < 2_000,
        "{relocations} load-time relocations in .rela.dyn"
    );
}

#[test]
fn version_alone_prints_what_the_command_line_parser_prints() {
    let sb = Sandbox::new().unwrap();
    // `-q --version` goes through the full parser (clap); `--version` and `-V` alone do not.
    let parsed = sb.run(&["-q", "--version"]).unwrap();
    assert_eq!(parsed.code, 0, "{parsed:?}");
    assert_eq!(
        parsed.stdout,
        format!("awf {}\n", env!("CARGO_PKG_VERSION"))
    );
    for flag in ["--version", "-V"] {
        let r = sb.run(&[flag]).unwrap();
        assert_eq!(r.code, 0, "{flag}: {r:?}");
        assert_eq!(r.stdout, parsed.stdout, "{flag}");
        assert_eq!(r.stderr, parsed.stderr, "{flag}");
    }
}

#[test]
fn subcommand_help_and_global_options_after_the_subcommand_work_as_before() {
    let sb = Sandbox::new().unwrap();
    sb.write(
        "wf.yaml",
        "name: wf\nstates:\n  initial: a\n  a:\n    type: step\n    command: 'true'\n    \
         on_success: done\n  done:\n    type: terminal\n",
    )
    .unwrap();
    // Global options after the subcommand (its hidden copies) parse, through an alias too.
    let r = sb
        .run(&["validate", "wf.yaml", "-f", "json", "--no-hints"])
        .unwrap();
    assert_eq!(r.code, 0, "{r:?}");
    r.json().unwrap();
    let r = sb.run(&["ls", "-f", "quiet", "--storage", "st"]).unwrap();
    assert_eq!(r.code, 0, "{r:?}");
    // `awf help <sub>`, `awf <sub> --help` and `awf <alias> --help` point at `awf --help`
    // and show no global option.
    for args in [&["help", "run"][..], &["run", "--help"], &["ls", "--help"]] {
        let r = sb.run(args).unwrap();
        assert_eq!(r.code, 0, "{args:?}: {r:?}");
        assert!(
            r.stdout.contains("see `awf --help`"),
            "{args:?}: {}",
            r.stdout
        );
        assert!(
            !r.stdout.contains("--otel-exporter"),
            "{args:?}: {}",
            r.stdout
        );
    }
    // The top-level help still lists them.
    let r = sb.run(&["--help"]).unwrap();
    assert!(r.stdout.contains("--otel-exporter"), "{}", r.stdout);
}
