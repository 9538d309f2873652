"""One controller configuration: defaults, the environment, a --config-file, one-line errors.

The last tests run the real manager (``osken-manager``, or ``ryu-manager`` where only Ryu exists) on
``controller/app.py`` with no ``ECHELON_*`` variable at all: options come from its ``--config-file``.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import pytest

from controller.client import EchelonClient
from controller.config import DEFAULTS, SETTINGS, ConfigError, ControllerConfig, oslo_options
from controller.enforcement import Enforcer
from controller.launcher import (
    ControllerError,
    ControllerProcess,
    free_tcp_port,
    local_config,
    manager_command,
)
from controller.registry import Registry
from controller.routing import Router
from controller.service import SchedulingService
from echelonflow.topology import fattree
from tests.helpers import unix_socket_listening

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APP = os.path.join(ROOT, "controller", "app.py")


def test_defaults_are_the_k4_fat_tree_at_10_mbit():
    config = ControllerConfig()
    topo = config.build_topology()
    assert (topo.name, topo.rate_bps) == ("fattree4", 10e6)
    assert (config.api_host, config.api_port, config.queues, config.interval_s) == ("127.0.0.1", 8181, 4, 0.5)
    assert [f for f in ControllerConfig.__dataclass_fields__] == [s.name for s in SETTINGS]


def test_each_default_is_written_once_and_every_component_reads_the_one_config():
    """The dataclass's defaults are SETTINGS's; router, enforcer and service take the config whole and
    read their settings from it (no keyword default of their own to drift from it)."""
    assert {f.name: f.default for f in dataclasses.fields(ControllerConfig)
            if f.default is not dataclasses.MISSING} == {s.name: s.default for s in SETTINGS
                                                        if s.name != "topology_params"}
    assert ControllerConfig().topology_params == DEFAULTS["topology_params"]
    topo = fattree(10e6, k=4)
    config = ControllerConfig(queues=6, route_idle_s=7, enforce_idle_s=8, meter_burst_s=0.5,
                              meter_min_burst_kbit=9, min_rate_bps=1e4, hold_paused=True, fixed_class=True,
                              check_decisions=True, interval_s=2.0)
    router, enforcer = Router(topo, config), Enforcer(topo, lambda dpid, ops: None, config)
    service = SchedulingService(Registry(topo), enforcer, config)
    assert router.idle_timeout_s == 7
    assert (enforcer.queues, enforcer.idle_timeout_s, enforcer.meter_burst_s, enforcer.min_burst_kbit) == (
        6, 8, 0.5, 9)
    assert service.config is config and service.idle_queue == 1  # hold_paused: idle channels in class 1
    defaults = ControllerConfig()
    assert Router(topo).idle_timeout_s == defaults.route_idle_s
    assert Enforcer(topo, lambda dpid, ops: None).idle_timeout_s == defaults.enforce_idle_s
    assert SchedulingService(Registry(topo)).config == defaults


def test_environment_round_trip_and_precedence():
    config = ControllerConfig(topology="leafspine", topology_params={"leaves": 3, "spines": 2,
                                                                    "hosts_per_leaf": 2},
                              rate_mbps=20.0, api_port=9000, metrics_port=None, stats_interval_s=0.0)
    env = config.to_env()
    assert ControllerConfig.load(env) == config
    assert env["ECHELON_METRICS_PORT"] == "off" and env["ECHELON_TOPOLOGY"] == ""
    assert config.build_topology().name == "leafspine3x2"
    assert ControllerConfig.load({"ECHELON_API_PORT": "8282"}).api_port == 8282


@pytest.mark.parametrize("name, value, problem", [
    ("ECHELON_API_PORT", "80a", "must be an integer between 1 and 65535, got '80a'"),
    ("ECHELON_API_PORT", "70000", "must be an integer between 1 and 65535, got 70000"),
    ("ECHELON_QUEUES", "1", "must be an integer between 2 and 8, got 1"),
    ("ECHELON_INTERVAL_S", "nan", "must be a number > 0 and <= 3600, got nan"),
    ("ECHELON_INTERVAL_S", "0", "must be a number > 0 and <= 3600, got 0.0"),
    ("ECHELON_TOPOLOGY_KIND", "ring", "must be one of two_hosts, dumbbell, fattree, leafspine"),
    ("ECHELON_TOPOLOGY_PARAMS", "k=4", "must be an object, got 'k=4'"),
    ("ECHELON_METRICS_PORT", "on", "must be an integer between 1 and 65535, got 'on'"),
    ("ECHELON_STORE", "", "must be a non-empty string, got ''"),
    ("ECHELON_MIN_RATE_BPS", "-1", "must be a number between 0 and 1e+12, got -1.0"),
])
def test_a_bad_variable_is_one_line_naming_it(name, value, problem):
    with pytest.raises(ConfigError) as err:
        ControllerConfig.load({name: value})
    assert str(err.value).startswith(f"{name}: ") and problem in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_topology_parameters_name_the_topology():
    with pytest.raises(ConfigError, match="topology fattree {'k': 3}: fat-tree k must be an even integer"):
        ControllerConfig(topology_params={"k": 3}).build_topology()


def test_config_file_section_through_oslo_config(tmp_path):
    """How a Ryu/os-ken app takes options: registered on an oslo ConfigOpts, read from --config-file."""
    from controller.compat import cfg

    conf_path = tmp_path / "echelon.conf"
    conf_path.write_text('[echelon]\ntopology = dumbbell\ntopology_params = {"hosts_per_side": 3}\n'
                         "rate_mbps = 25\napi_port = 8282\nmetrics_port = off\n")
    conf = cfg.ConfigOpts()
    conf.register_opts(oslo_options(cfg), group="echelon")
    conf(args=["--config-file", str(conf_path)], project="echelon-test")
    from_file = ControllerConfig.load({}, conf.echelon)
    assert (from_file.topology, from_file.rate_mbps, from_file.api_port, from_file.metrics_port) == (
        "dumbbell", 25.0, 8282, None)
    assert from_file.build_topology().name == "dumbbell3"
    assert ControllerConfig.load({"ECHELON_API_PORT": "8383"}, conf.echelon).api_port == 8383  # env wins
    conf_path.write_text("[echelon]\nqueues = many\n")
    conf.reload_config_files()
    with pytest.raises(ConfigError, match=r"^\[echelon\] queues: must be an integer between 2 and 8"):
        ControllerConfig.load({}, conf.echelon)


def test_launcher_passes_its_settings_as_one_config(require_controller, tmp_path):
    config = local_config(queues=3, interval_s=0.25, min_rate_bps=1.44e6, api_port=8555, metrics_port=None)
    ctl = ControllerProcess(fattree(10e6, 4), config, ofp_port=free_tcp_port(), workdir=str(tmp_path))
    again = ControllerConfig.load(ctl.app_config().to_env())
    assert (again.topology_file, again.queues, again.interval_s, again.api_port, again.min_rate_bps) == (
        ctl.spec_path, 3, 0.25, 8555, 1.44e6)
    assert (again.store, again.api_socket) == (str(tmp_path / "registry.sqlite"), str(tmp_path / "api.sock"))
    assert again.metrics_port is None and ctl.metrics_url is None
    with pytest.raises(ControllerError, match="^interval_s: must be a number > 0"):
        local_config(interval_s=0)


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECHELON_")}
    env["PYTHONWARNINGS"] = "ignore::DeprecationWarning"
    return env


def _conf(tmp_path, **extra) -> tuple[str, dict[str, str]]:
    values = {"api_port": str(free_tcp_port()), "api_socket": str(tmp_path / "api.sock"),
              "store": str(tmp_path / "registry.sqlite"), "token_file": str(tmp_path / "token"),
              "metrics_port": "off", **extra}
    path = tmp_path / "echelon.conf"
    path.write_text("[echelon]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))
    return str(path), values


def test_plain_manager_with_a_config_file_runs_the_default_fat_tree(require_controller, tmp_path):
    conf, values = _conf(tmp_path)
    argv = manager_command() + ["--ofp-tcp-listen-port", str(free_tcp_port()), "--ofp-listen-host",
                                "127.0.0.1", "--config-file", conf, APP]
    with open(tmp_path / "manager.log", "wb") as log:
        proc = subprocess.Popen(argv, cwd=str(tmp_path), env=_clean_env(), stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while not unix_socket_listening(values["api_socket"]):
                assert proc.poll() is None, (tmp_path / "manager.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "the app did not start"
                time.sleep(0.1)
            with EchelonClient(socket_path=values["api_socket"], token_file=values["token_file"]) as client:
                health = client.health()
            assert health["topology"] == "fattree4"
            assert health["switches"] == {"connected": 0, "expected": 20}
        finally:
            proc.terminate()
            proc.wait(10)
    assert not os.path.exists(values["api_socket"])


def test_a_bad_config_file_value_stops_the_app_with_one_line(require_controller, tmp_path):
    conf, _values = _conf(tmp_path, interval_s="soon")
    argv = manager_command() + ["--ofp-tcp-listen-port", str(free_tcp_port()), "--config-file", conf, APP]
    proc = subprocess.run(argv, cwd=str(tmp_path), env=_clean_env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert errors == ["echelon controller: error: [echelon] interval_s: must be a number > 0 and <= 3600, "
                      "got 'soon'"], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert sys.executable  # the manager ran next to this interpreter


def test_the_configuration_page_lists_every_setting_with_its_variable_and_default():
    """docs/controller-config.md stays true: one row per setting, with its variable and default."""
    from controller.config import SETTINGS, _shown

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "docs", "controller-config.md"), encoding="utf-8") as fh:
        page = fh.read()
    rows = {line.split("|")[1].strip(" `"): line for line in page.splitlines()
            if line.startswith("| `") and line.count("|") == 5}
    assert sorted(rows) == sorted(s.name for s in SETTINGS)
    for spec in SETTINGS:
        assert f"`{spec.env}`" in rows[spec.name] and f"`{_shown(spec) or '(empty)'}`" in rows[spec.name]
