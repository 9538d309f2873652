"""What the CLI starts dies with it, and what a killed run left is found and removed.

Real processes throughout: ``echelon controller`` (the CLI wrapper) and its ``osken-manager`` child are
signalled by pid and watched through /proc; a run killed with SIGKILL is a real Python process that
started real children.  The emulation case at the end runs the real fabric.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from controller.launcher import ControllerProcess, free_tcp_port
from echelonflow import ownership
from echelonflow.topology import two_hosts
from tests.waiting import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _alive(pid: int) -> bool:
    """Running and not a zombie (a killed child of ours is a zombie until we reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


def test_stop_children_terms_the_willing_and_kills_the_stubborn_by_one_deadline():
    """The one stop used for the controller, the agents and the capture: SIGTERM, then SIGKILL."""
    stubborn_code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                     "print(1, flush=True); time.sleep(60)")
    stubborn = [subprocess.Popen([sys.executable, "-c", stubborn_code], stdout=subprocess.PIPE)
                for _ in range(2)]
    for proc in stubborn:
        proc.stdout.readline()  # its SIGTERM handler is in place
    willing = subprocess.Popen(["sleep", "60"])
    done = subprocess.Popen(["true"])
    done.wait()
    started = time.monotonic()
    ownership.stop_children([willing, None, done, *stubborn], grace_s=2.0)
    took_s = time.monotonic() - started
    assert willing.returncode == -signal.SIGTERM
    assert [p.returncode for p in stubborn] == [-signal.SIGKILL, -signal.SIGKILL]
    assert 2.0 <= took_s < 4.0  # one shared deadline: grace_s per stubborn child would be 4 s
    for proc in stubborn:
        proc.stdout.close()


def _start_cli_controller(tmp_path):
    """``echelon controller`` on ports and files of its own (not the fixed metrics port 9302: the
    parallel pass runs these tests side by side)."""
    api_port = free_tcp_port()
    files = {"socket": str(tmp_path / "api.sock"), "token": str(tmp_path / "token"),
             "store": str(tmp_path / "reg.sqlite")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", "controller", "--topology", "two_hosts", "--ofp-port",
         str(free_tcp_port()), "--api-port", str(api_port), "--metrics-port", str(free_tcp_port({api_port})),
         "--api-socket", files["socket"], "--token-file", files["token"], "--store", files["store"]],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("echelon controller: pid"), (line, proc.stderr.read() if proc.poll() else "")
    child = int(line.split()[3].rstrip(","))
    workdir = line.rsplit("log ", 1)[1].split(";")[0].rsplit("/", 1)[0]
    return proc, child, workdir, files


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signalled_cli_controller_takes_its_manager_and_files_with_it(tmp_path, signum, require_controller):
    """``kill -TERM`` of ``echelon controller`` used to leave osken-manager serving."""
    proc, child, workdir, files = _start_cli_controller(tmp_path)
    try:
        assert _alive(child) and os.path.isdir(workdir)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == (130 if signum == signal.SIGINT else 128 + signum), err
        assert err.strip().splitlines()[-1].startswith("echelon: "), err
        assert not _alive(child), "osken-manager outlived its wrapper"
        assert not os.path.exists(workdir), "the controller's temporary folder stayed"
        assert not os.path.exists(files["socket"]) and not os.path.exists(files["token"])
        assert os.path.exists(files["store"])  # the registry is kept on purpose (a restart resumes)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def test_dead_manager_is_reported_by_its_signal_not_a_log_tail(tmp_path, require_controller):
    proc, child, _workdir, _files = _start_cli_controller(tmp_path)
    try:
        os.kill(child, signal.SIGKILL)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 2
        assert err.strip() == "echelon: error: the controller was killed by SIGKILL", err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_openflow_listens_on_loopback_only(require_controller):
    """The OpenFlow port was bound to 0.0.0.0 (the API was already loopback only)."""
    ctl = ControllerProcess(two_hosts(10e6), ofp_port=free_tcp_port())
    with ctl:
        port_hex = f"{ctl.ofp_port:04X}"
        with open("/proc/net/tcp") as fh:
            listening = [line.split()[1] for line in fh if line.split()[3] == "0A"]
        ours = [addr for addr in listening if addr.endswith(":" + port_hex)]
        assert ours == [f"0100007F:{port_hex}"], ours


KILLED_RUN = textwrap.dedent("""
    import subprocess, sys, time
    from controller.launcher import ControllerProcess, free_tcp_port
    from echelonflow import ownership
    from echelonflow.topology import two_hosts
    ctl = ControllerProcess(two_hosts(10e6), ofp_port=free_tcp_port()).start()
    run = ownership.make_run_folder("test")
    stubborn = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    ownership.record_processes(run, stubborn.pid)
    print(ctl.pid, ctl.workdir, run, stubborn.pid, flush=True)
    time.sleep(600)
""")


# Serial: between the kill and its clean-up, another worker's clean-up of this machine's abandoned folders
# (test_clean_leaves_live_owners_and_foreign_folders_alone) would take them first.
@pytest.mark.serial
def test_killed_run_leaves_nothing_after_clean(require_controller):
    """SIGKILL of a run left its controller serving and its folder (token, registry) behind.

    The controller dies with its parent (parent-death signal); a child that ignores SIGTERM and the
    temporary folders are ended and removed by the clean-up from the folders' owner records.
    """
    owner = subprocess.Popen([sys.executable, "-c", KILLED_RUN], cwd=ROOT, stdout=subprocess.PIPE,
                             text=True)
    manager = stubborn = None
    try:
        manager_s, ctl_dir, run_dir, stubborn_s = owner.stdout.readline().split()
        manager, stubborn = int(manager_s), int(stubborn_s)
        assert _alive(manager) and _alive(stubborn)
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
        wait_until(lambda: not _alive(manager), 10, "the controller to die with its parent")
        assert _alive(stubborn) and os.path.isdir(ctl_dir) and os.path.isdir(run_dir)
        totals = ownership.clean_abandoned()
        assert totals["folders"] >= 2 and totals["processes"] >= 1, totals
        wait_until(lambda: not _alive(stubborn), 5, "the stubborn child to be killed by pid")
        assert not os.path.exists(ctl_dir) and not os.path.exists(run_dir)
    finally:
        for pid in (owner.pid, manager, stubborn):
            if pid and _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_clean_leaves_live_owners_and_foreign_folders_alone(tmp_path):
    mine = ownership.make_run_folder("live")
    try:
        foreign = tmp_path / "echelon-foreign"
        foreign.mkdir()
        (foreign / "owner.json").write_text("not json")
        before = set(os.listdir(tmp_path))
        assert ownership.clean_abandoned(str(tmp_path)) == {"folders": 0, "processes": 0}
        assert set(os.listdir(tmp_path)) == before
        ownership.clean_abandoned()
        assert os.path.isdir(mine)
    finally:
        import shutil

        shutil.rmtree(mine)


@pytest.mark.fabric
def test_killed_emulation_is_cleaned_by_fabric_clean(require_fabric, tmp_path):
    """The issue's reproduction: ``kill -9`` of ``echelon emulate`` mid-run, then ``echelon fabric clean``."""
    emu = subprocess.Popen([sys.executable, "-m", "cli", "emulate", "fig2", "--scheduler", "echelon",
                            "--no-plots", "--out", str(tmp_path / "run")],
                           cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: any("agents ready" in line for line in iter(emu.stderr.readline, "")), 120,
              "the emulation to start its agents")
        children = _children(emu.pid)
        folders = [os.path.join("/tmp", n) for n in os.listdir("/tmp") if n.startswith("echelon-emu-")
                   and (ownership.read_owner(os.path.join("/tmp", n)) or {}).get("owner", {}).get("pid")
                   == emu.pid]
        assert children and len(folders) == 1
        os.kill(emu.pid, signal.SIGKILL)
        emu.wait()
        clean = subprocess.run([sys.executable, "-m", "cli", "fabric", "clean"], cwd=ROOT,
                               capture_output=True, text=True, timeout=120)
        assert clean.returncode == 0, clean.stderr
        wait_until(lambda: not any(_alive(pid) for pid in children), 10, "the run's processes to end")
        assert not os.path.exists(folders[0])
    finally:
        if emu.poll() is None:
            emu.kill()
            emu.wait()
