"""reports.flow_breakdown on hand-made agent documents: parts, rate tracking and TCP recovery."""

from __future__ import annotations

import pytest

from reports.flow_breakdown import (
    allocation_lag,
    flow_parts,
    format_class_changes,
    format_lag,
    format_rate_after_raise,
    rate_after_raise,
    rate_tracking,
    retransmits_by_class_changes,
    summarise,
    tcp_recovery,
)


def _docs(progress: list[list[float]], allocations: list[dict] | None = None) -> dict:
    """h1 sends j/a (1 MB) to h2; j/b, which needs j/a, starts on h2 0.002 s after j/a arrives."""
    sent = {"j/a": {"dst": "h2", "size_bytes": 1_000_000, "start": 1.0, "first_byte": 1.001,
                    "last_queued": 1.5, "confirmed": 2.004, "progress": progress,
                    "allocations": allocations or []}}
    received = {"j/a": {"src": "h1", "header": 1.010, "finish": 2.0}}
    return {
        "h1": {"host": "h1", "sent": sent, "received": {}, "tasks": {"j/x": {"start": 0.0, "finish": 0.999}}},
        "h2": {"host": "h2", "sent": {}, "received": received, "tasks": {"j/b": {"start": 2.002}}},
    }


def test_a_flows_life_is_split_at_the_agents_time_stamps():
    docs = _docs([[1.1, 0, 0, 0]])
    parts = flow_parts(docs, {"j/a": ["j/x"], "j/b": ["j/a"]}, {"j/a": {"start_s": 1.0, "finish_s": 1.8}})
    (flow,) = parts
    assert flow.parts_s == pytest.approx({"wake_s": 0.001, "send_s": 0.001, "header_s": 0.009,
                                          "transfer_s": 0.99, "drain_s": 0.5, "confirm_s": 0.004,
                                          "dependants_s": 0.002})
    assert flow.emulated_s == pytest.approx(1.0) and flow.simulated_s == pytest.approx(0.8)
    assert summarise(parts)["emulated_over_simulated"]["median"] == pytest.approx(1.25)


def test_rate_tracking_compares_acked_payload_with_the_allocation_in_force():
    # 8 Mbit/s allocated from t=1.0; 0.5 MB acked per 0.5 s = 8 Mbit/s, then 4 Mbit/s
    allocations = [{"t_s": 1.0, "dscp": 8, "rate_bps": 8e6, "pacing_bytes_per_s": 1_000_000}]
    progress = [[1.0, 0, 0, 0], [1.5, 500_000, 0, 0], [2.0, 750_000, 0, 0], [2.5, 1_000_000, 0, 0]]
    tracking = rate_tracking(_docs(progress, allocations), payload_fraction=1.0)
    # the last interval reaches the flow's size (its tail is partly idle): left out
    assert tracking["intervals"] == 2
    assert tracking["achieved_over_allocated"] == pytest.approx(0.75)
    assert tracking["under_80_share"] == pytest.approx(0.5)


def test_tcp_recovery_counts_retransmitting_and_timed_out_flows():
    clean = _docs([[1.1, 10, 0, 0], [1.2, 20, 0, 0]])
    assert tcp_recovery(clean) == {"flows": 1, "retransmitting": 0, "timed_out": 0, "retransmits": 0}
    lossy = _docs([[1.1, 10, 3, 0], [1.2, 10, 4, 1], [1.6, 30, 4, 0]])
    assert tcp_recovery(lossy) == {"flows": 1, "retransmitting": 1, "timed_out": 1, "retransmits": 4}
    # documents from agents that recorded (t, acked) pairs only: nothing to say about TCP recovery
    assert tcp_recovery(_docs([[1.1, 10]]))["flows"] == 0


def test_retransmissions_are_grouped_by_the_flows_class_changes():
    moved = [{"t_s": 1.0, "dscp": 24}, {"t_s": 1.2, "dscp": 8}, {"t_s": 1.4, "dscp": 8},
             {"t_s": 1.5, "dscp": 16}]
    docs = _docs([[1.1, 10, 0, 0], [1.6, 900, 5, 0]], moved)  # two changes (the repeat of 8 is none)
    docs["h2"]["sent"] = {"j/c": {"progress": [[1.1, 5, 0, 0]], "allocations": [{"t_s": 1.0, "dscp": 8}]}}
    groups = retransmits_by_class_changes(docs)
    assert groups == {0: [0], 2: [5]}
    assert format_class_changes(groups) == [
        "  class changes 0: 1 flows, 0.00 segments retransmitted on average, 0% retransmitting",
        "  class changes 2: 1 flows, 5.00 segments retransmitted on average, 100% retransmitting"]


def test_rate_after_raise_groups_intervals_by_time_since_the_allocation_rose():
    # parked (0) until 1.0, raised to 8 Mbit/s, lowered to 4 Mbit/s at 1.5; polls every 0.05 s up to 1.2,
    # then at 1.5, 1.6: nothing acknowledged in the first poll after the raise (the stall a raise costs)
    allocations = [{"t_s": 0.5, "dscp": 24, "rate_bps": 0.0, "pacing_bytes_per_s": None},
                   {"t_s": 1.0, "dscp": 8, "rate_bps": 8e6, "pacing_bytes_per_s": 1_000_000},
                   {"t_s": 1.5, "dscp": 16, "rate_bps": 4e6, "pacing_bytes_per_s": 500_000}]
    progress = [[0.9, 0, 0, 0], [1.0, 0, 0, 0], [1.05, 0, 0, 0], [1.1, 100_000, 0, 0],
                [1.2, 200_000, 0, 0], [1.5, 500_000, 0, 0], [1.6, 550_000, 0, 0]]
    groups = rate_after_raise(_docs(progress, allocations), payload_fraction=1.0)
    # t1 = 1.0, 1.05: < 0.1 s after the raise (0 and 16 Mbit/s); 1.1, 1.2: 0.1-0.3 s (8, 8); 1.5: lowered
    flat = {label: [x for pair in pairs for x in pair] for label, pairs in groups.items()}
    assert flat["< 0.1 s"] == pytest.approx([0.0, 8e6, 16e6, 8e6])
    assert flat["0.1-0.3 s"] == pytest.approx([8e6, 8e6, 8e6, 8e6])
    assert flat["lowered"] == pytest.approx([4e6, 4e6])
    assert groups["0.3-1 s"] == [] and groups[">= 1 s"] == []
    lines = format_rate_after_raise(groups)
    assert lines[0].split() == ["<", "0.1", "s", "2", "intervals,", "achieved/allocated", "1.00,", "50%",
                                "under", "80", "%,", "50%", "with", "nothing", "acknowledged"]
    assert len(lines) == 3  # empty groups are not printed


def test_allocation_lag_is_decision_to_applied_for_every_change_after_the_first():
    allocations = [{"t_s": 1.003, "dscp": 8, "rate_bps": 1e7, "decided_s": 1.001},  # with the start answer
                   {"t_s": 1.204, "dscp": 8, "rate_bps": 5e6, "decided_s": 1.2},
                   {"t_s": 1.5, "dscp": 8, "rate_bps": 2e6, "decided_s": 1.45},
                   {"t_s": 1.6, "dscp": 8, "rate_bps": 1e6, "decided_s": None}]  # no time: not counted
    lags = allocation_lag(_docs([[1.1, 0, 0, 0]], allocations))
    assert lags == pytest.approx([0.004, 0.05])
    assert format_lag(lags) == ("  allocation changes heard 2: decision -> applied median 50.0 ms, "
                                "p90 50.0 ms, max 50.0 ms")  # upper values (the module's quantile)
    assert "none" in format_lag([])
