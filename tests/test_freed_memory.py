"""Freed heap memory handed back after a large run is built (``simulator/freed_memory.py``): the pages
glibc kept for reuse leave the process's resident set, and the simulator does it once a large run is
built, after its first decision and every ``TRIM_EVERY_DECISIONS`` decisions, never for small runs
(docs/performance.md, "Memory at trace scale", "Memory in the run")."""

from __future__ import annotations

from echelonflow.scenario import load_scenario
from echelonflow.schedulers import get_scheduler
from simulator import engine, freed_memory

BLOCK_BYTES = 4096  # above pymalloc's 512 bytes and below glibc's mmap threshold: served by the heap
BLOCKS = 16_384  # 64 MiB


def resident_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_freed_heap_pages_leave_the_resident_set() -> None:
    blocks = [bytearray(BLOCK_BYTES) for _ in range(BLOCKS)]
    for block in blocks:
        block[::512] = b"x" * (BLOCK_BYTES // 512)  # touch every page
    pin = bytearray(BLOCK_BYTES)  # the heap's top stays in use, so freeing the rest cannot shrink it
    held = resident_mib()
    del blocks[:]
    freed = resident_mib()
    assert freed > held - 16, "glibc returned the blocks by itself: the test no longer shows anything"
    assert freed_memory.return_freed_memory() is True  # glibc (Debian)
    assert resident_mib() < freed - 40
    del pin


def test_only_large_builds_trim(monkeypatch) -> None:
    calls: list[bool] = []
    real = freed_memory.return_freed_memory

    def counted() -> bool:
        calls.append(real())
        return calls[-1]

    monkeypatch.setattr(freed_memory, "return_freed_memory", counted)
    scenario = load_scenario("fig2")
    engine.simulate(scenario.topology, scenario.jobs, get_scheduler("echelon"))
    assert calls == []
    monkeypatch.setattr(engine, "TRIM_ABOVE_TASKS", 1)
    result = engine.simulate(scenario.topology, scenario.jobs, get_scheduler("echelon"))
    assert calls and all(calls)
    assert sorted(round(job.completion_s, 9) for job in result.jobs.values()) == [8.0]  # fig2: echelon 8 s


def test_a_large_run_trims_once_built_after_its_first_decision_and_every_so_many(monkeypatch) -> None:
    calls: list[int] = []
    real = freed_memory.return_freed_memory
    monkeypatch.setattr(freed_memory, "return_freed_memory", lambda: calls.append(1) or real())
    monkeypatch.setattr(engine, "TRIM_ABOVE_TASKS", 1)
    monkeypatch.setattr(engine, "TRIM_EVERY_DECISIONS", 3)
    scenario = load_scenario("fig2")
    specs = {job.job_id: engine.echelon_mod.echelons_of(job) for job in scenario.jobs}
    run = engine._Run(scenario.topology, list(scenario.jobs), get_scheduler("sincronia"), True, specs)
    assert len(calls) == 1
    run.run()
    # once built, before the second decision (after the policy's first, which builds its kept state) and
    # before every third
    assert run.decisions >= 4 and len(calls) == 1 + 1 + run.decisions // 3
