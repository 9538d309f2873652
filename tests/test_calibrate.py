"""``echelon emulate --dilation auto`` (emulation/calibrate.py): the smallest factor the fidelity monitor
trusts is chosen and every factor's measurements are kept; on a real fabric the calibration runs
iperf3 through the controller-routed fabric and returns a factor with its numbers."""

from __future__ import annotations

import json

import pytest

from echelonflow.scenario import load_scenario
from emulation.calibrate import CalibrationError, CalibrationSettings, calibrate, fair_share_bps, host_pairs
from emulation.monitor import IntervalStats, evaluate
from tests.helpers import run_echelon


def test_host_pairs_are_the_flows_endpoints_once_each():
    assert host_pairs(load_scenario("fig2").jobs) == [("h1", "h2")]
    pairs = host_pairs(load_scenario("fattree-gpipe-ring").jobs)
    assert ("h1", "h5") in pairs and ("h5", "h1") in pairs  # GPipe: activations forward, gradients back
    assert len(pairs) == len(set(pairs)) == 6 + 4


def _monitor_doc(link_ratio: float) -> dict:
    """What the fidelity monitor says about 20 intervals whose one busy port ran at ``link_ratio``."""
    return evaluate([IntervalStats(t * 0.5, t * 0.5 + 0.5, 0.4, 0.9, 0.9, 0.1, {"p": link_ratio}, 0.0)
                     for t in range(20)])


def test_the_smallest_trusted_factor_is_chosen_and_every_trial_recorded(tmp_path):
    seen = []

    def measure(topology, pairs, settings, out_dir, factor):  # the link keeps up from x4 on
        seen.append((factor, topology.rate_bps, pairs))
        goodput_bps = {"h1->h2": 0.9 * topology.rate_bps}
        return dict(_monitor_doc(0.97 if factor >= 4 else 0.6), goodput_bps=goodput_bps)

    scenario = load_scenario("fig2")
    out = calibrate(scenario.topology, scenario.jobs, lambda _text: None, str(tmp_path), measure=measure)
    assert [f for f, _r, _p in seen] == [1.0, 2.0, 4.0]  # stops at the first trusted factor
    assert [r for _f, r, _p in seen] == [10e6, 5e6, 2.5e6] and seen[0][2] == [("h1", "h2")]
    assert out["factor"] == 4.0 and out["chosen_by"] == "calibration"
    trials = out["calibration"]["trials"]
    assert [t["trusted"] for t in trials] == [False, False, True]
    assert trials[0]["slow_link_share"] == 1.0 and "below 90%" in trials[0]["reasons"][0]
    assert trials[2]["link_ratio_median"] == pytest.approx(0.97)
    saved = json.loads((tmp_path / "calibration" / "calibration.json").read_text())
    assert saved["trials"] == json.loads(json.dumps(trials)) and set(saved["monitor"]) == {"x1", "x2", "x4"}


def test_a_fabric_that_never_backlogs_a_port_is_judged_by_its_goodput(tmp_path):
    """Seen at k=8 with 10 Gbit/s links: the userspace datapath forwarded 0.57 of the 96 Gbit/s the
    links allow, so no port ever backlogged, the monitor had nothing to judge and trusted x1."""
    scenario = load_scenario("multitenant-k8")
    pairs = host_pairs(scenario.jobs)
    fair = fair_share_bps(scenario.topology, pairs)
    assert len(fair) == len(pairs) and all(0 < r <= scenario.topology.rate_bps for r in fair.values())
    forwarded_bps = 1.0e9  # what the machine forwards in all, whatever the factor

    def measure(topology, pairs, settings, out_dir, factor):
        no_busy_port = [IntervalStats(t * 0.5, t * 0.5 + 0.5, 0.4, 1.0, 1.0, 0.5, {}, 0.0) for t in range(20)]
        quiet = evaluate(no_busy_port)
        allowed = fair_share_bps(topology, pairs)
        scale = min(1.0, forwarded_bps / sum(allowed.values()))
        return dict(quiet, goodput_bps={f"{s}->{d}": r * scale for (s, d), r in allowed.items()})

    settings = CalibrationSettings(factors=(1.0, 16.0, 64.0))
    out = calibrate(scenario.topology, scenario.jobs, lambda _text: None, str(tmp_path), settings,
                    measure=measure)
    trials = out["calibration"]["trials"]
    assert out["factor"] == 64.0 and [t["busy_port_intervals"] for t in trials] == [0, 0, 0]
    assert [t["trusted"] for t in trials] == [False, False, True]
    assert trials[0]["delivered_share"] == pytest.approx(forwarded_bps / sum(fair.values()))
    assert "max-min sharing of the links allows" in trials[0]["reasons"][0]
    settings = CalibrationSettings(factors=(1.0, 16.0))
    needed = r"forwarded, about x48 would be needed"  # 16 x 0.5 / (1000 / 5997)
    with pytest.raises(CalibrationError, match=needed):
        calibrate(scenario.topology, scenario.jobs, lambda _text: None, str(tmp_path), settings,
                  measure=measure)


def test_no_trusted_factor_is_one_clear_error_with_the_measurements_kept(tmp_path):
    scenario = load_scenario("fig2")
    settings = CalibrationSettings(factors=(1.0, 2.0))
    expected = r"no time dilation up to x2 .* below 90% of the configured rate"
    with pytest.raises(CalibrationError, match=expected):
        calibrate(scenario.topology, scenario.jobs, lambda _text: None, str(tmp_path), settings,
                  measure=lambda *args: _monitor_doc(0.5))
    assert len(json.loads((tmp_path / "calibration" / "calibration.json").read_text())["trials"]) == 2


@pytest.mark.parametrize("value", ["0.5", "fast", "inf", "0"])
def test_a_bad_dilation_argument_is_one_line_and_exit_status_2(value):
    proc = run_echelon("emulate", "fig2", "--dilation", value, timeout_s=60)
    assert proc.returncode == 2 and "--dilation: must be 'auto' or a number from 1 to 64" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.fabric
def test_calibration_on_a_real_fabric_returns_a_factor_and_its_measurements(require_fabric, tmp_path):
    """fattree-gpipe-ring's 10 host pairs sending at once through a k=4 fat-tree and the real controller:
    a factor comes back with the monitor's numbers of every factor tried, and the chosen one was
    trusted with busy ports near their configured (dilated) rate."""
    scenario = load_scenario("fattree-gpipe-ring")
    lines: list[str] = []
    settings = CalibrationSettings(traffic_s=6, factors=(1.0, 2.0, 4.0, 8.0))
    try:
        out = calibrate(scenario.topology, scenario.jobs, lines.append, str(tmp_path), settings)
    except CalibrationError as exc:  # an honest answer too, but then the numbers must be there
        pytest.fail(f"{exc}; progress: {lines}")
    trials = out["calibration"]["trials"]
    assert out["factor"] in settings.factors and trials[-1]["factor"] == out["factor"]
    assert trials[-1]["trusted"] and all(not t["trusted"] for t in trials[:-1])
    chosen = trials[-1]
    assert chosen["rate_bps"] == pytest.approx(10e6 / out["factor"])
    assert chosen["busy_port_intervals"] >= 10, chosen  # every stream has a backlogged first switch port
    assert 0.9 <= chosen["link_ratio_median"] <= 1.1, chosen
    assert chosen["delivered_share"] >= 0.5, chosen  # the pairs got their fair rates' worth
    assert len(chosen["goodput_bps"]) == 10 and all(v and v > 0 for v in chosen["goodput_bps"].values())
    folder = tmp_path / "calibration"
    assert (folder / "calibration.json").is_file()
    monitors = {p.name for p in folder.glob("monitor-x*.json")}
    assert monitors == {f"monitor-x{t['factor']:g}.json" for t in trials}
    assert any("calibration x1:" in line for line in lines)


@pytest.mark.parametrize("args, message", [
    (["--congestion-control", "vegas"], "--congestion-control: must be one of this kernel's"),
    (["--host-sysctl", "net.ipv4.tcp_recovery"], "--host-sysctl: must be NAME=VALUE"),
    (["--host-sysctl", "kernel.panic=1"], "is not a net.ipv4, net.ipv6 or net.core sysctl name"),
    (["--host-sysctl", "net.ipv4.no_such_thing=1"], "this kernel has no sysctl 'net.ipv4.no_such_thing'"),
    (["--host-sysctl", "net.ipv4.tcp_recovery=1;reboot"], "value '1;reboot' is not 1-40 letters"),
])
def test_bad_transport_arguments_are_one_line_and_exit_status_2(args, message):
    """The hosts' TCP options of `echelon emulate` are checked before anything starts."""
    proc = run_echelon("emulate", "fig2", *args, timeout_s=60)
    assert proc.returncode == 2 and message in proc.stderr
    assert "Traceback" not in proc.stderr
