"""Every bad input is one line and exit status 2: JSON beyond the strict reader's limits, input files
beyond the size limit, topologies and workloads beyond echelonflow/limits.py, output folders that are files.

Each case runs the real command line (``python -m cli ...``, or the controller app under ``osken-manager``
for its settings) in a subprocess, as a user would, and asserts exit status 2, exactly one line on stderr
naming the file (or setting) and the problem, and no traceback.  The size cases also bound the time the
refusal takes by the time the same command takes to refuse a trivially bad input: the check must come
before anything is built or read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from controller.launcher import free_tcp_port, manager_command
from echelonflow.errors import UserError
from echelonflow.fileio import JsonLimitError, loads_strict, read_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEEP = "[" * 5000 + "]" * 5000
HUGE = 10**400
TWO_HOSTS = {"kind": "two_hosts", "rate_mbps": 10}


def _cli(*args: str, env: dict[str, str] | None = None, timeout_s: float = 120) -> tuple[str, float]:
    """Run ``echelon ARGS``; returns its one stderr line and wall time after asserting exit 2, one line,
    no traceback."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout_s, env={**os.environ, **(env or {})})
    took_s = time.monotonic() - started
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("echelon: error: "), lines[0]
    return lines[0], took_s


def _write(path, content) -> str:
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def _scenario(tmp_path, name: str, topology=TWO_HOSTS, jobs=None) -> str:
    jobs = jobs or [{"id": "g", "generator": "gpipe", "hosts": ["h1", "h2"],
                     "params": {"activation_bytes": 10}}]
    return _write(tmp_path / name, {"topology": topology, "jobs": jobs, "schedulers": ["fair"]})


# ------------------------------------------------------------------ the strict JSON reader, directly
def test_loads_strict_limits_name_the_field():
    with pytest.raises(JsonLimitError) as err:
        loads_strict(f'{{"jobs": [{{"size_bytes": {HUGE}}}]}}')
    assert err.value.field == "jobs[0].size_bytes" and "out of range" in err.value.problem
    with pytest.raises(JsonLimitError, match="too large for a double"):
        loads_strict('{"a": 1e400}')
    with pytest.raises(JsonLimitError, match="nested deeper than 64 levels"):
        loads_strict(DEEP)
    with pytest.raises(JsonLimitError, match="nested deeper than 64 levels"):
        loads_strict("[" * 65 + "]" * 65)
    assert loads_strict("[" * 64 + "]" * 64) is not None
    assert loads_strict(str(2**63 - 1)) == 2**63 - 1 and loads_strict(str(-(2**63) + 1)) == -(2**63) + 1
    with pytest.raises(JsonLimitError):
        loads_strict(str(2**63))


def test_input_size_limit_is_adjustable(tmp_path, monkeypatch):
    path = tmp_path / "two-mib.json"
    path.write_text("[" + " " * (2 << 20) + "]")
    assert read_json(path, "scenario") == []
    monkeypatch.setenv("ECHELON_MAX_INPUT_MIB", "1")
    with pytest.raises(UserError, match="larger than the 1 MiB input limit"):
        read_json(path, "scenario")
    monkeypatch.setenv("ECHELON_MAX_INPUT_MIB", "lots")
    with pytest.raises(UserError, match="ECHELON_MAX_INPUT_MIB must be a whole number"):
        read_json(path, "scenario")


def test_a_pipe_beyond_the_limit_is_refused_after_the_limit(tmp_path, monkeypatch):
    """A FIFO has no size to look at: reading stops once the limit is passed."""
    monkeypatch.setenv("ECHELON_MAX_INPUT_MIB", "1")
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"yes ' ' > {fifo}"])
    try:
        with pytest.raises(UserError, match="larger than the 1 MiB input limit"):
            read_json(fifo, "scenario")
    finally:
        writer.kill()
        writer.wait()


# ------------------------------------------------------------------ deep JSON, huge numbers: the CLI
def test_deep_scenario_trace_grid_and_results_are_one_line(tmp_path):
    deep = _write(tmp_path / "deep.json", DEEP)
    line, _ = _cli("simulate", deep)
    assert deep in line and "nested deeper than 64 levels" in line
    line, _ = _cli("emulate", deep)
    assert deep in line and "nested deeper" in line
    scenario = _scenario(tmp_path, "with-trace.json", jobs=[{"trace": "deep.json"}])
    line, _ = _cli("simulate", scenario)
    assert deep in line and "nested deeper" in line
    line, _ = _cli("sweep", deep, "--out", str(tmp_path / "sweep"))
    assert f"grid {deep}" in line and "nested deeper" in line
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _write(run_dir / "results.json", DEEP)
    line, _ = _cli("report", str(run_dir))
    assert str(run_dir / "results.json") in line and "nested deeper" in line


def test_huge_size_in_a_trace_is_one_line_in_simulate_and_emulate(tmp_path):
    trace = {"jobs": [{"id": "j", "tasks": [{"id": "f", "type": "flow", "src": "h1", "dst": "h2",
                                              "size_bytes": 0}]}]}
    text = json.dumps(trace).replace('"size_bytes": 0', f'"size_bytes": {HUGE}')
    path = _write(tmp_path / "huge.json", text)
    scenario = _scenario(tmp_path, "scenario.json", jobs=[{"trace": "huge.json"}])
    for command in ("simulate", "emulate"):
        line, _ = _cli(command, scenario)
        assert path in line and "jobs[0].tasks[0].size_bytes" in line and "out of range" in line, line


def test_output_folder_that_is_a_file_is_one_line_before_any_run(tmp_path):
    existing = _write(tmp_path / "existing", "x")
    line, took_s = _cli("emulate", "fig2", "--out", existing)
    assert existing in line and "not a folder" in line
    grid = _write(tmp_path / "grid.json", {"scenarios": ["fig2"], "schedulers": ["fair"]})
    line, _ = _cli("sweep", grid, "--out", existing)
    assert existing in line and "not a folder" in line


# ------------------------------------------------------------------ unbounded reads
def test_dev_zero_and_links_to_it_are_refused_without_reading_them(tmp_path):
    line, _ = _cli("sweep", "/dev/zero", "--out", str(tmp_path / "sweep"))
    assert "/dev/zero" in line and "NUL byte" in line
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.symlink("/dev/zero", run_dir / "results.json")
    line, _ = _cli("report", str(run_dir))
    assert str(run_dir / "results.json") in line and "NUL byte" in line
    linked = tmp_path / "scenario.json"
    os.symlink("/dev/zero", linked)
    line, _ = _cli("simulate", str(linked))
    assert str(linked) in line and "NUL byte" in line


def test_a_2_gib_scenario_is_refused_by_its_size(tmp_path):
    big = tmp_path / "zeros.json"
    with open(big, "wb") as fh:
        fh.truncate(2 << 30)  # sparse: no disk used, and nothing of it may be read
    line, _ = _cli("simulate", str(big))
    assert str(big) in line and "2,147,483,648 bytes" in line and "256 MiB input limit" in line


# ------------------------------------------------------------------ sizes checked before building
def test_huge_fat_tree_and_workload_are_refused_before_anything_is_built(tmp_path):
    # the reference: the same commands refusing an input that fails the very first check
    _, odd_s = _cli("simulate", _scenario(tmp_path, "odd.json", {"kind": "fattree", "k": 3, "rate_mbps": 10}))
    line, k1000_s = _cli("simulate", _scenario(tmp_path, "k1000.json",
                                                {"kind": "fattree", "k": 1000, "rate_mbps": 10}))
    assert "fat-tree k=1000 would have 250,000,000 hosts" in line and "16,384" in line
    params = {"activation_bytes": 10, "micro_batches": 1e9}
    micro = _scenario(tmp_path, "micro.json",
                      jobs=[{"id": "g", "generator": "gpipe", "hosts": ["h1", "h2"], "params": params}])
    line, micro_s = _cli("simulate", micro)
    assert "6,000,000,000 tasks" in line and "1,000,000 allowed per job" in line
    _, controller_odd_s = _cli("controller", "--k", "3")
    line, controller_s = _cli("controller", "--k", "400")
    assert "fat-tree k=400 would have 16,000,000 hosts" in line
    # Building any of these took from 20 s to minutes before; refusing one costs what refusing k=3 does
    # (the interpreter's start-up), so twice that plus half a second is a generous margin.
    for took_s, reference_s in ((k1000_s, odd_s), (micro_s, odd_s), (controller_s, controller_odd_s)):
        assert took_s < 2 * reference_s + 0.5, (took_s, reference_s)


def test_multi_tenant_job_count_is_checked_before_drawing(tmp_path):
    scenario = _scenario(tmp_path, "mt.json", {"kind": "fattree", "k": 4, "rate_mbps": 10},
                         jobs=[{"multi_tenant": {"jobs": 10**9, "load": 0.5}}])
    line, _ = _cli("simulate", scenario)
    assert "1,000,000,000 jobs need at least as many hosts" in line


# ------------------------------------------------------------------ the controller app's own settings
def _controller_app(tmp_path, env: dict[str, str], config_file: str | None = None) -> str:
    """Run the real app under the manager with ``env``; its one error line (exit status 2)."""
    base = {"ECHELON_STORE": str(tmp_path / "registry.sqlite"), "ECHELON_TOKEN_FILE": str(tmp_path / "token"),
            "ECHELON_API_SOCKET": str(tmp_path / "api.sock"), "ECHELON_API_PORT": str(free_tcp_port()),
            "ECHELON_METRICS_PORT": "off", "PYTHONWARNINGS": "ignore"}
    command = manager_command() + (["--config-file", config_file] if config_file else [])
    command += ["--ofp-tcp-listen-port", str(free_tcp_port()), os.path.join(ROOT, "controller", "app.py")]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **base, **env})
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-2000:]
    assert "Traceback" not in output, output[-2000:]
    errors = [line for line in output.splitlines() if line.startswith("echelon controller: error: ")]
    assert len(errors) == 1, output[-2000:]
    return errors[0]


def test_controller_settings_deep_json_dev_zero_and_huge_topology_are_one_line(require_controller, tmp_path):
    line = _controller_app(tmp_path, {"ECHELON_TOPOLOGY_PARAMS": DEEP})
    assert "ECHELON_TOPOLOGY_PARAMS: nested deeper than 64 levels" in line
    config = _write(tmp_path / "echelon.conf", f"[echelon]\ntopology_params = {DEEP}\n")
    line = _controller_app(tmp_path, {}, config_file=config)
    assert "[echelon] topology_params: nested deeper than 64 levels" in line
    line = _controller_app(tmp_path, {"ECHELON_TOPOLOGY": "/dev/zero"})
    assert "topology spec /dev/zero" in line and "NUL byte" in line
    line = _controller_app(tmp_path, {"ECHELON_TOPOLOGY_KIND": "fattree",
                                      "ECHELON_TOPOLOGY_PARAMS": '{"k": 400}'})
    assert "fat-tree k=400 would have 16,000,000 hosts" in line


def test_a_refused_controller_start_writes_nothing(tmp_path, occupied, require_controller):
    """A socket path that is a regular file, a busy API port, a token file that is a folder: refused in
    one line before the app takes its locks, opens its store or writes its token."""
    for env, reason in (({"ECHELON_API_SOCKET": str(occupied.plain)}, "not a socket"),
                        ({"ECHELON_API_PORT": str(occupied.port)}, "cannot listen"),
                        ({"ECHELON_TOKEN_FILE": str(tmp_path)}, "is a directory")):
        before = sorted(os.listdir(tmp_path))
        line = _controller_app(tmp_path, env)
        assert reason in line, line
        assert sorted(os.listdir(tmp_path)) == before, env  # no store, no lock files
        assert occupied.token.read_text() == "the running controller's token\n"
        assert occupied.plain.read_text() == "not a socket"


# ------------------------------------------------------------------ numbers out of range, non-JSON output
def test_a_trace_weight_of_1e308_is_one_line_not_infinity_in_the_output(tmp_path):
    """Issue 35: a weight of 1e308 made the objective infinite and ``simulate --json`` print
    ``Infinity``; the weight is now outside the table of ranges (echelonflow/limits.py)."""
    trace = _write(tmp_path / "t.json", {"jobs": [{"id": "j", "weight": 1e308, "tasks": [
        {"id": "f", "type": "flow", "src": "h1", "dst": "h2", "size_bytes": 1000}]}]})
    scenario = _write(tmp_path / "s.json", {"topology": TWO_HOSTS, "jobs": [{"trace": trace}]})
    line, _took = _cli("simulate", scenario, "--json")
    assert "weight: must be a number > 0 and <= 1e+06, got 1e+308" in line and "t.json" in line


def test_json_output_never_holds_nan_or_infinity():
    from echelonflow.fileio import dumps_strict

    assert dumps_strict({"a": [1.5]}) == '{"a": [1.5]}'
    for bad in (float("inf"), float("-inf"), float("nan")):
        with pytest.raises(UserError, match=r"^result: runs\[0\]\.objective_s is .*not a number JSON allows"):
            dumps_strict({"runs": [{"objective_s": bad}]}, "result")
