"""What numba's reference counting costs a kernel's helper call, and what handing a kernel named tuples
of arrays costs its call from Python (docs/performance.md, "Reference counts").

Run: ``.venv/bin/python benchmarks/bench_reference_counts.py [--calls N]``.

A ``mark_moved``-like helper (two reads, two writes, an early return: a branch) is called N times in a
compiled loop, given: a named tuple of 8 arrays; the same with ``inline="always"``; its three arrays,
taken out of the tuple before the loop; nothing (the helper written out in the loop); and, compiled
with ``kernels.jit_borrowing``'s options (no reference counting), the tuple.  Then a compiled function
that reads one value of each argument is called from Python 100,000 times with two named tuples of 32
and 20 arrays (echelon's kept totals and table have that shape), and with two arrays.  Nothing is
cached (each variant compiled here), so the numbers are this numba's on this machine.
"""

from __future__ import annotations

import argparse
import time
from collections import namedtuple

import numpy as np
from numba import njit

Eight = namedtuple("Eight", ["kept", "moved_head", "moved_next", "a3", "a4", "a5", "a6", "a7"])
Totals = namedtuple("Totals", [f"a{i}" for i in range(32)])
Table = namedtuple("Table", [f"b{i}" for i in range(20)])


def _mark(kept, moved_head, moved_next, slot, f):
    if kept[slot] == 0 or moved_next[f] != 0:
        return
    moved_next[f] = moved_head[slot] + 1
    moved_head[slot] = f + 1


counted = njit(cache=False)(_mark)
borrowing = njit(cache=False, _nrt=False)(_mark)


def _mark_counted(t, slot, f):
    counted(t.kept, t.moved_head, t.moved_next, slot, f)


def _mark_borrowing(t, slot, f):
    borrowing(t.kept, t.moved_head, t.moved_next, slot, f)


counted_tuple = njit(cache=False)(_mark_counted)
inlined_tuple = njit(cache=False, inline="always")(_mark_counted)
borrowing_tuple = njit(cache=False, _nrt=False)(_mark_borrowing)


def _loop_calling(mark):
    """A compiled loop calling ``mark`` (a compiled helper given the whole tuple) once per step: one loop
    for each way of compiling the helper, so the loops differ in nothing else."""

    @njit(cache=False)
    def loop(t, n):
        for i in range(n):
            mark(t, i & 7, i & 1023)
            t.moved_next[i & 1023] = 0

    return loop


loop_tuple = _loop_calling(counted_tuple)
loop_inlined = _loop_calling(inlined_tuple)
loop_borrowing = _loop_calling(borrowing_tuple)


@njit(cache=False)
def loop_arrays(t, n):
    kept, head, nxt = t.kept, t.moved_head, t.moved_next
    for i in range(n):
        counted(kept, head, nxt, i & 7, i & 1023)
        nxt[i & 1023] = 0


@njit(cache=False)
def loop_written_out(t, n):
    kept, head, nxt = t.kept, t.moved_head, t.moved_next
    for i in range(n):
        slot, f = i & 7, i & 1023
        if kept[slot] != 0 and nxt[f] == 0:
            nxt[f] = head[slot] + 1
            head[slot] = f + 1
        nxt[f] = 0


@njit(cache=False)
def read_tuples(x, totals, table):
    return x + totals.a0[0] + table.b0[0]


@njit(cache=False)
def read_arrays(x, a, b):
    return x + a[0] + b[0]


def ns_per_call(loop, t, calls: int) -> float:
    loop(t, 10)  # compile
    started = time.perf_counter()
    loop(t, calls)
    return (time.perf_counter() - started) / calls * 1e9


def us_per_python_call(function, args: tuple, calls: int = 100_000) -> float:
    function(*args)  # compile
    started = time.perf_counter()
    for _ in range(calls):
        function(*args)
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000_000, help="helper calls per variant")
    calls = parser.parse_args().calls
    if calls < 1:
        parser.error(f"--calls must be at least 1, got {calls}")
    eight = Eight(np.ones(8, np.int64), *[np.zeros(n, np.int64) for n in (8, 1024, 4, 4, 4, 4, 4)])
    print(f"helper calls in a compiled loop, ns per call ({calls:,} calls each)")
    for label, loop in (("given a named tuple of 8 arrays", loop_tuple),
                        ('the same, inline="always"', loop_inlined),
                        ("given its 3 arrays, taken out before the loop", loop_arrays),
                        ("written out in the loop", loop_written_out),
                        ("given the tuple, compiled with _nrt=False", loop_borrowing)):
        print(f"  {label:<48} {ns_per_call(loop, eight, calls):8.2f}")
    totals = Totals(*[np.zeros(10, np.int64) for _ in range(32)])
    table = Table(*[np.zeros(10) for _ in range(20)])
    print("a compiled function called from Python, us per call (100,000 calls each)")
    for label, function, args in (("given named tuples of 32 and 20 arrays", read_tuples, (1, totals, table)),
                                  ("given two arrays", read_arrays, (1, totals.a0, table.b0))):
        print(f"  {label:<48} {us_per_python_call(function, args):8.2f}")


if __name__ == "__main__":
    main()
