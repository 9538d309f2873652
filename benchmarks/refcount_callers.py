"""Which compiled kernels call numba's reference counting, from a perf profile (docs/performance.md,
"Reference counts").

perf cannot name numba's code: it is compiled in memory.  ``map`` runs ``exact_rule_scaling.py`` with the
given arguments and then writes ``/tmp/perf-<pid>.map``, perf's map of just-in-time code, naming every
function of every compiled kernel (numba's assembly gives the names, its library their addresses).
numba shows its assembly only for what it compiled in the process, so run it with an empty cache.
``NRT_incref`` and ``NRT_decref`` touch no stack, so a sample taken inside one has its return address
as the first word of the user stack perf copied; ``callers`` reads those from ``perf script -D``'s raw
dump and counts them by the function they return into::

    NUMBA_CACHE_DIR=$(mktemp -d) perf record -e cpu-clock -F 1000 --call-graph dwarf,64 -o refs.data \\
        .venv/bin/python benchmarks/refcount_callers.py map --coflows 200 --scheduler echelon
    perf script -D --no-inline -i refs.data | .venv/bin/python benchmarks/refcount_callers.py callers \\
        /tmp/perf-PID.map

(PID: the one ``map`` prints; ``DEBUGINFOD_URLS=`` keeps perf from looking symbols up over the network.)
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import importlib
import os
import re
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
KERNEL_MODULES = ("echelonflow.schedulers.kernels", "echelonflow.schedulers.echelon_kernels",
                  "echelonflow.schedulers.echelon_totals", "echelonflow.schedulers.varys_kernels",
                  "echelonflow.schedulers.echelon_runs", "simulator.fluid")
COUNTING = ("NRT_incref", "NRT_decref")


def _short(symbol: str) -> str:
    """A mangled numba symbol's first few names (``echelonflow.schedulers.echelon_kernels._serve_runs``)."""
    names = re.findall(r"\d+([a-z_][a-z_0-9]+)", symbol)
    return ".".join(names[:4]) if names else symbol[:60]


def write_map(scaling_args: list[str]) -> Path:
    """Run ``exact_rule_scaling.py`` with ``scaling_args``, then write this process's perf map."""
    from numba.core.registry import CPUDispatcher

    sys.argv = ["exact_rule_scaling.py", *scaling_args]
    with contextlib.suppress(SystemExit):  # the script ends with sys.exit
        runpy.run_path(str(ROOT / "benchmarks" / "exact_rule_scaling.py"), run_name="__main__")
    named = {}
    for module in map(importlib.import_module, KERNEL_MODULES):
        for name, value in vars(module).items():
            if not isinstance(value, CPUDispatcher):
                continue
            for compiled in value.overloads.values():
                library = compiled.library
                labels = set(re.findall(r"^([A-Za-z_$][\w.$]*):", library.get_asm_str(), re.M))
                for label in labels | set(COUNTING):
                    try:
                        address = library.get_pointer_to_function(label)
                    except Exception:  # a label numba did not export (a local symbol)
                        continue
                    if address:
                        named[address] = label if label in COUNTING else f"{name}:{_short(label)}"
    entries = sorted(named.items())
    path = Path(f"/tmp/perf-{os.getpid()}.map")
    with path.open("w") as out:
        for i, (address, name) in enumerate(entries):
            size = entries[i + 1][0] - address if i + 1 < len(entries) else 0x10000
            out.write(f"{address:x} {min(size, 0x100000):x} {name}\n")
    return path


def count_callers(map_path: Path, dump) -> tuple[int, collections.Counter]:
    """(samples in the dump, (counting function, caller) -> samples inside the counting)."""
    entries = []
    for line in map_path.read_text().splitlines():
        start, size, name = line.split(" ", 2)
        entries.append((int(start, 16), int(size, 16), name))
    starts = [start for start, _, _ in entries]
    counting = [(start, start + size, name) for start, size, name in entries if name in COUNTING]
    raw, ip, total, callers = bytearray(), None, 0, collections.Counter()
    for line in dump:
        if line.startswith(". ... raw event"):
            raw = bytearray()
        elif line.startswith(".  ") and ":" in line[:10]:
            raw.extend(bytes.fromhex("".join(line[9:57].split())))
        elif match := re.search(r"PERF_RECORD_SAMPLE\(IP, 0x2\): \d+/\d+: (0x[0-9a-f]+)", line):
            ip, total = int(match.group(1), 16), total + 1
        elif (match := re.match(r"\.\.\. ustack: size \d+, offset (0x[0-9a-f]+)", line)) and ip is not None:
            inside = [name for lo, hi, name in counting if lo <= ip < hi]
            if inside:
                at = int(match.group(1), 16) + 8  # the stack's size comes first, then its bytes
                back = int.from_bytes(raw[at:at + 8], "little")
                i = bisect.bisect_right(starts, back) - 1
                known = i >= 0 and back < entries[i][0] + entries[i][1]
                callers[(inside[0], entries[i][2] if known else "?")] += 1
            ip = None
    return total, callers


def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] == "map":
        print(f"perf map written: {write_map(sys.argv[2:])}")
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "callers":
        map_path = Path(sys.argv[2])
        if not map_path.is_file():
            print(f"refcount_callers.py: no perf map at {map_path}", file=sys.stderr)
            return 2
        total, callers = count_callers(map_path, sys.stdin)
        print(f"{total} samples, {sum(callers.values())} inside {' / '.join(COUNTING)}")
        for (inside, caller), samples in callers.most_common(30):
            print(f"{samples:8d}  {inside}  {caller}")
        return 0
    print("usage: refcount_callers.py map [exact_rule_scaling.py arguments...]\n"
          "       perf script -D | refcount_callers.py callers /tmp/perf-PID.map", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
