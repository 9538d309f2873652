"""Channel plans (how many persistent connections each agent opens) and the pool that hands them out."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from echelonflow.scenario import load_scenario
from echelonflow.schedulers import get_scheduler
from simulator.engine import simulate
from traffic.channels import ChannelPool, channel_plan, max_overlap
from traffic.transfer import Channel, ChannelRoute


@pytest.mark.parametrize("intervals, expected", [
    ([], 0),
    ([(0, 1)], 1),
    ([(0, 1), (1, 2), (2, 3)], 1),  # back to back: one channel carries all three
    ([(0, 2), (1, 3), (2.5, 4)], 2),
    ([(0, 10), (1, 2), (3, 4), (1.5, 3.5)], 3),
])
def test_max_overlap(intervals, expected):
    assert max_overlap(intervals) == expected


def flow(src, dst, start_s, finish_s):
    return SimpleNamespace(src=src, dst=dst, start_s=start_s, finish_s=finish_s)


def test_plan_counts_flows_in_flight_per_source_destination_and_path():
    flows = {"j/a": flow("h1", "h2", 0, 2), "j/b": flow("h1", "h2", 1, 3), "j/c": flow("h1", "h2", 3, 4),
             "j/d": flow("h1", "h3", 0, 1), "j/e": flow("h2", "h1", 0, 5)}
    plan = channel_plan(flows, lambda src, dst, key: [src, "s", dst])
    assert plan == {"h1": [{"dst": "h2", "path": ["h1", "s", "h2"], "count": 2},
                           {"dst": "h3", "path": ["h1", "s", "h3"], "count": 1}],
                    "h2": [{"dst": "h1", "path": ["h2", "s", "h1"], "count": 1}]}
    # flows of one pair pinned to different paths need channels of their own
    by_flow = {"j/a": ["h1", "x", "h2"], "j/b": ["h1", "y", "h2"], "j/c": ["h1", "x", "h2"]}
    plan = channel_plan({k: flows[k] for k in by_flow}, lambda src, dst, key: by_flow[key])
    assert plan == {"h1": [{"dst": "h2", "path": ["h1", "x", "h2"], "count": 1},
                           {"dst": "h2", "path": ["h1", "y", "h2"], "count": 1}]}


def test_plan_of_a_simulated_run_covers_every_flow_on_its_pinned_path():
    scenario = load_scenario("fattree-gpipe-ring")
    run = simulate(scenario.topology, scenario.jobs, get_scheduler("echelon"))
    topo = scenario.topology
    plan = channel_plan(run.flows, topo.path_for)
    keys = {(src, e["dst"], tuple(e["path"])) for src, entries in plan.items() for e in entries}
    for qid, result in run.flows.items():
        assert (result.src, result.dst, tuple(topo.path_for(result.src, result.dst, qid))) in keys
    # a ring step's flows of one pair run one after another, so most keys need one channel
    counts = [e["count"] for entries in plan.values() for e in entries]
    assert min(counts) == 1 and sum(counts) <= len(run.flows)


_NUMBERS = iter(range(1, 1 << 20))


def unconnected(key):
    dst, path = key
    return Channel(f"h1.{dst}.{next(_NUMBERS)}", ChannelRoute("h1", dst, "127.0.0.1", "127.0.0.2", 1, path))


def test_pool_hands_out_idle_channels_and_counts_the_ones_it_had_to_open_late():
    pool = ChannelPool(unconnected)
    pool.open(("h2", None), 2)
    first, second = pool.acquire(("h2", None)), pool.acquire(("h2", None))
    assert first is not second and pool.opened_late == 0
    third = pool.acquire(("h2", None))  # both busy: a third is opened on the flow's critical path
    assert pool.opened_late == 1 and len(pool.channels) == 3
    pool.release(("h2", None), first)
    assert pool.acquire(("h2", None)) is first and pool.opened_late == 1
    assert pool.acquire(("h3", None)).route.dst == "h3" and pool.opened_late == 2  # a key the plan lacked
    for channel in (second, third):
        pool.release(("h2", None), channel)
    pool.close()


def test_pool_never_hands_one_channel_to_two_flows_at_once():
    pool = ChannelPool(unconnected)
    pool.open(("h2", None), 3)
    held, lock, clash = set(), threading.Lock(), []

    def worker():
        for _ in range(200):
            channel = pool.acquire(("h2", None))
            with lock:
                if channel.channel_id in held:
                    clash.append(channel.channel_id)
                held.add(channel.channel_id)
            with lock:
                held.discard(channel.channel_id)
            pool.release(("h2", None), channel)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not clash


def test_a_channel_takes_the_congestion_control_it_is_given():
    """`echelon emulate --congestion-control` reaches every channel's socket; a name the kernel lacks is
    one clear error, not a socket left open."""
    import socket

    from traffic.transfer import TransferError, available_congestion_controls

    chosen = next(name for name in available_congestion_controls() if name != "bbr")
    route = ChannelRoute("h1", "h2", "127.0.0.1", "127.0.0.1", 9)
    channel = Channel("h1.h2.0", route, congestion_control=chosen)
    channel.bind()
    try:
        got = channel.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
        assert got.rstrip(b"\0").decode() == chosen
    finally:
        channel.close()
    bad = Channel("h1.h2.1", route, congestion_control="nosuch")
    with pytest.raises(TransferError, match="TCP congestion control 'nosuch'"):
        bad.bind()
    assert bad.sock is None
