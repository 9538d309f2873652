"""``controller.plan``: the difference between what the switches hold and what a decision wants,
computed without a switch (the service applies it; tests/test_service.py drives that end)."""

from __future__ import annotations

from controller.plan import Installed, Operation, plan

TOLERANCE = 0.01


def test_nothing_changed_plans_nothing() -> None:
    state = {"a": Installed(1, 5e6), "b": Installed(3, None)}
    assert plan(state, dict(state), TOLERANCE) == []


def test_removals_come_first_then_installs_and_updates_in_decision_order() -> None:
    installed = {"gone": Installed(2, 1e6), "kept": Installed(1, 4e6)}
    desired = {"new": Installed(1, 2e6), "kept": Installed(2, 4e6)}
    assert plan(installed, desired, TOLERANCE) == [
        Operation("remove", "gone", None),
        Operation("install", "new", Installed(1, 2e6), queue=1, rate_bps=2e6),
        Operation("update", "kept", Installed(2, 4e6), queue=2),
    ]


def test_a_rate_moves_only_beyond_the_tolerance_and_the_small_drift_is_kept_as_installed() -> None:
    installed = {"f": Installed(1, 1e6)}
    assert plan(installed, {"f": Installed(1, 1.005e6)}, TOLERANCE) == []
    assert plan(installed, {"f": Installed(2, 1.005e6)}, TOLERANCE) == [
        Operation("update", "f", Installed(2, 1e6), queue=2)]  # the meter still holds 1e6
    assert plan(installed, {"f": Installed(1, 1.02e6)}, TOLERANCE) == [
        Operation("update", "f", Installed(1, 1.02e6), rate_bps=1.02e6)]


def test_a_meter_is_added_or_cleared_when_the_decision_starts_or_stops_metering() -> None:
    assert plan({"f": Installed(1, None)}, {"f": Installed(1, 3e6)}, TOLERANCE) == [
        Operation("update", "f", Installed(1, 3e6), rate_bps=3e6)]
    assert plan({"f": Installed(1, 3e6)}, {"f": Installed(1, None)}, TOLERANCE) == [
        Operation("update", "f", Installed(1, None), clear_rate=True)]


def test_applying_the_plan_reaches_the_desired_state() -> None:
    installed = {f"f{i}": Installed(i % 4, None if i % 3 == 0 else 1e6 * (i + 1)) for i in range(12)}
    desired = {f"f{i}": Installed((i + 1) % 4, None if i % 5 == 0 else 1e6 * (i + 1) * 1.5)
               for i in range(6, 18)}
    state = dict(installed)
    for op in plan(installed, desired, TOLERANCE):
        if op.kind == "remove":
            del state[op.flow_id]
        else:
            state[op.flow_id] = op.after
    assert state == desired
