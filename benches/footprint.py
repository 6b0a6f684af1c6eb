"""Where a process's resident memory is, from /proc/<pid>/smaps (issues 11 and 12: RSS).

`breakdown(pid)` sums the smaps fields of each kind of mapping, in KiB:
  exe r-x   the executable's code (file-backed, clean: pages the kernel mapped in, including
            those its fault-around brought beside the page that was touched)
  exe r--   its read-only data (.rodata, .eh_frame, .rela.dyn; after start-up also
            .data.rel.ro, whose pages are private dirty when the loader relocated them)
  exe rw-   its writable data (.data, .bss, .got)
  libs      shared libraries (libc, libm, libgcc_s, the loader)
  heap      [heap] and anonymous mappings (the allocator's arenas, thread stacks)
  stack     the main thread's [stack]
Each with Rss and Private_Dirty, plus the thread count. Used by benches/mcp.py and
benches/acp.py with `--smaps` (the figures are stable from run to run, unlike the timings).
"""
import os
import re

KINDS = ["exe r-x", "exe r--", "exe rw-", "libs", "heap", "stack"]


def breakdown(pid):
    exe = os.path.realpath(f"/proc/{pid}/exe")
    sums = {k: {"Rss": 0, "Private_Dirty": 0} for k in KINDS}
    kind = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            m = re.match(r"^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ \S+\s*(.*)$", line)
            if m:
                perm, name = m.group(1), m.group(2)
                if name == exe:
                    kind = "exe " + perm[:3] if "exe " + perm[:3] in sums else "exe r--"
                elif name == "[stack]":
                    kind = "stack"
                elif name.startswith("/"):
                    kind = "libs"
                elif name in ("", "[heap]"):
                    kind = "heap"
                else:
                    kind = None  # [vdso], [vvar], ...
                continue
            key, _, value = line.partition(":")
            if kind and key in ("Rss", "Private_Dirty"):
                sums[kind][key] += int(value.split()[0])
    with open(f"/proc/{pid}/status") as f:
        threads = next((int(l.split()[1]) for l in f if l.startswith("Threads:")), 0)
    return sums, threads


def line(pid):
    """One line: `exe r-x 5708 (dirty 0) | ... | threads 2` (KiB)."""
    sums, threads = breakdown(pid)
    total = sum(v["Rss"] for v in sums.values())
    parts = [f"{k} {v['Rss']} (dirty {v['Private_Dirty']})" for k, v in sums.items()]
    return f"RSS {total} KiB: " + " | ".join(parts) + f" | threads {threads}"


def symbol_order_note():
    """One line on the linker's symbol ordering file (scripts/symbol-order.py): whether it was
    generated for this tree's Cargo files and toolchain. A stale file leaves the code of the
    servers spread over `.text` again (exe r-x grows by several MB), so the RSS rows say why."""
    import importlib.util
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("symbol_order", os.path.join(root, "scripts", "symbol-order.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    why = mod.staleness()
    return f"symbol order: STALE: {why}" if why else f"symbol order: current ({mod.fingerprint()})"
