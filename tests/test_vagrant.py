"""The Vagrant VM files, checked as far as a machine without a hypervisor allows.

No VM boots here (no nested virtualisation, no boxes reachable), so these tests check what can be
checked for real: the shell scripts are shellcheck-clean; the Vagrantfile parses AND evaluates (with a
recording stand-in for Vagrant's ``configure`` object) to the intended box, providers, synced folder and
provisioner; every pip package is pinned; bad input is refused before anything changes; and the VM's
Python step (``vagrant/venv.sh`` with the VM's package set and the project) really installs on Python 3.9.
shellcheck and ruby come from ``bash bootstrap.sh --test``; under ``CI=true`` missing tools fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import need_python39, need_tool

ROOT = Path(__file__).resolve().parent.parent
VAGRANT_DIR = ROOT / "vagrant"
CONSTRAINTS = VAGRANT_DIR / "requirements-vm.txt"
PIN_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!-]*)$")

# Loads the Vagrantfile with a stand-in for Vagrant that records every configuration call as JSON.
RUBY_RECORDER = r"""
require "json"
class Recorder
  def initialize(path, log)
    @path = path
    @log = log
  end

  def method_missing(name, *args, **kwargs, &block)
    full = @path + [name.to_s]
    return Recorder.new(full, @log) if args.empty? && kwargs.empty? && block.nil?
    @log << { "call" => full.join("."), "args" => args, "kwargs" => kwargs }
    block&.call(Recorder.new(full + [args.first.to_s], @log))
    args.first
  end

  def respond_to_missing?(*) = true
end

module Vagrant
  LOG = []
  def self.configure(version)
    LOG << { "call" => "configure", "args" => [version], "kwargs" => {} }
    yield Recorder.new([], LOG)
  end
end

load ARGV.fetch(0)
puts JSON.generate(Vagrant::LOG)
"""


def pins() -> dict[str, str]:
    """Normalised package name -> version from the constraints file."""
    result: dict[str, str] = {}
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            match = PIN_RE.match(line)
            assert match, f"requirements-vm.txt: {line!r} is not pinned as name==version"
            result[normalise(match.group(1))] = match.group(2)
    return result


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def record_vagrantfile(tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    ruby = need_tool("ruby")
    recorder = tmp_path / "recorder.rb"
    recorder.write_text(RUBY_RECORDER)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ECHELON_")}  # defaults unless given
    return subprocess.run([ruby, str(recorder), str(VAGRANT_DIR / "Vagrantfile")], capture_output=True,
                          text=True, timeout=60, env=dict(clean, **(env or {})))


# --------------------------------------------------------------------------- static checks
def test_shell_scripts_are_shellcheck_clean() -> None:
    shellcheck = need_tool("shellcheck")
    scripts = sorted(str(p) for p in VAGRANT_DIR.glob("*.sh"))
    assert {Path(s).name for s in scripts} >= {"provision.sh", "venv.sh"}
    result = subprocess.run([shellcheck, "--severity=style", *scripts], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    for script in scripts:
        text = Path(script).read_text()
        assert "set -euo pipefail" in text, f"{script} lacks set -euo pipefail"


def test_vagrantfile_parses() -> None:
    ruby = need_tool("ruby")
    result = subprocess.run([ruby, "-c", str(VAGRANT_DIR / "Vagrantfile")], capture_output=True, text=True)
    assert result.returncode == 0 and "Syntax OK" in result.stdout, result.stdout + result.stderr


def test_vagrantfile_configures_box_providers_folder_and_provisioner(tmp_path: Path) -> None:
    result = record_vagrantfile(tmp_path)
    assert result.returncode == 0, result.stderr
    calls = json.loads(result.stdout)
    by_name: dict[str, list] = {}
    for call in calls:
        by_name.setdefault(call["call"], []).append(call)

    assert by_name["configure"][0]["args"] == ["2"]
    assert by_name["vm.box="][0]["args"] == ["debian/bullseye64"]
    folders = by_name["vm.synced_folder"]
    assert {"call": "vm.synced_folder", "args": [".", "/vagrant"], "kwargs": {"disabled": True}} in folders
    project = [f for f in folders if f["args"][1] == "/vagrant" and not f["kwargs"].get("disabled")]
    assert len(project) == 1
    assert Path(project[0]["args"][0]).resolve() == ROOT, "the whole project must be synced to /vagrant"
    assert project[0]["kwargs"]["type"] == "rsync"
    assert ".venv/" in project[0]["kwargs"]["rsync__exclude"]
    assert set(by_name["vm.provider"][i]["args"][0] for i in range(2)) == {"virtualbox", "libvirt"}
    for provider in ("virtualbox", "libvirt"):
        assert by_name[f"vm.provider.{provider}.cpus="][0]["args"] == [4]
        assert by_name[f"vm.provider.{provider}.memory="][0]["args"] == [4096]
    (provision,) = by_name["vm.provision"]
    assert provision["args"] == ["shell"]
    assert (VAGRANT_DIR / provision["kwargs"]["path"]).is_file()
    assert provision["kwargs"]["args"] == ["/vagrant", "/opt/echelon"]


def test_vagrantfile_honours_and_checks_its_environment_knobs(tmp_path: Path) -> None:
    ok = record_vagrantfile(tmp_path, {"ECHELON_VM_CPUS": "2", "ECHELON_VM_MEMORY_MB": "2048",
                                       "ECHELON_SYNC_TYPE": "nfs"})
    assert ok.returncode == 0, ok.stderr
    calls = json.loads(ok.stdout)
    assert {"call": "vm.provider.libvirt.cpus=", "args": [2], "kwargs": {}} in calls
    assert {"call": "vm.provider.virtualbox.memory=", "args": [2048], "kwargs": {}} in calls
    assert any(c["call"] == "vm.synced_folder" and c["kwargs"].get("type") == "nfs" for c in calls)
    for name, value in (("ECHELON_VM_CPUS", "many"), ("ECHELON_VM_MEMORY_MB", "12"),
                        ("ECHELON_SYNC_TYPE", "ftp")):
        bad = record_vagrantfile(tmp_path, {name: value})
        assert bad.returncode != 0
        assert name in bad.stderr and value in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr and ".rb:" not in bad.stderr, bad.stderr


def test_every_pip_package_is_pinned_once() -> None:
    names = []
    for line in CONSTRAINTS.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            assert PIN_RE.match(line), f"requirements-vm.txt: {line!r} is not name==version"
            names.append(normalise(line.split("==")[0]))
    duplicates = sorted({n for n in names if names.count(n) > 1})
    assert not duplicates, f"pinned twice: {duplicates}"
    table = pins()
    assert table["ryu"] == "4.34" and table["eventlet"] == "0.30.2"
    assert int(table["setuptools"].split(".")[0]) < 68
    assert tuple(int(x) for x in table["dnspython"].split(".")[:2]) < (2, 3)


def test_scripts_install_only_pinned_packages() -> None:
    """Every name venv.sh hands to pip is in the constraints file (so pip cannot pick a version)."""
    text = (VAGRANT_DIR / "venv.sh").read_text()
    named = set()
    for group in re.findall(r"PACKAGES\+?=\(([^)]*)\)", text):
        named.update(group.split())
    named.update(re.search(r"pip_install --upgrade ([a-z ]+)\n", text).group(1).split())
    assert {"ryu", "eventlet", "dnspython", "networkx", "pytest", "matplotlib"} <= named
    missing = sorted(n for n in named if normalise(n) not in pins())
    assert not missing, f"venv.sh installs unpinned packages: {missing}"
    assert '-c "$CONSTRAINTS"' in text


def test_referenced_project_paths_exist() -> None:
    """Paths the VM uses (/vagrant/... is the project root) exist in the project."""
    texts = {p.name: p.read_text() for p in VAGRANT_DIR.iterdir() if p.is_file()}
    referenced = set()
    for text in texts.values():
        referenced.update(re.findall(r"(?<![\w/}])/vagrant/([A-Za-z0-9_./-]+\.(?:py|sh|toml|json))", text))
        referenced.update(re.findall(r"\$PROJECT_DIR/([A-Za-z0-9_./-]+\.(?:py|sh|toml|json))", text))
    assert {"controller/app.py", "vagrant/venv.sh"} <= referenced, referenced
    missing = sorted(r for r in referenced if not (ROOT / r).is_file())
    assert not missing, f"vagrant/ refers to files that do not exist: {missing}"


# --------------------------------------------------------------------------- scripts refuse bad input
def test_venv_script_refuses_bad_input_and_creates_nothing(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    script = str(VAGRANT_DIR / "venv.sh")
    cases = [
        (["--python", "/usr/bin/python3", "--venv", str(venv)], "needs Python 3.8 or 3.9"),
        (["--python", str(tmp_path / "nope"), "--venv", str(venv)], "does not exist"),
        (["--python", "/usr/bin/python3", "--venv", str(venv), "--with", "gpu"], "--with takes"),
        (["--python", "/usr/bin/python3", "--venv", str(venv), "--project", str(tmp_path)], "no pyproject"),
        (["--venv", str(venv), "--frobnicate"], "unknown argument"),
    ]
    for args, message in cases:
        result = subprocess.run(["bash", script, *args], capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "line " not in result.stderr, result.stderr  # no bash error trace
        assert not venv.exists(), f"{args} created {venv}"


def test_provision_refuses_a_wrong_project_dir_before_changing_anything(tmp_path: Path) -> None:
    venv = tmp_path / "opt-echelon"
    result = subprocess.run(["bash", str(VAGRANT_DIR / "provision.sh"), str(tmp_path), str(venv)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    expected = "run me as root" if os.geteuid() != 0 else "is not the EchelonFlow project"
    assert expected in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert not venv.exists()
    assert not Path("/etc/modules-load.d/echelon-openvswitch.conf").exists()


# --------------------------------------------------------------------------- the VM's Python step
@pytest.mark.slow
def test_vm_python_step_installs_on_python39_with_only_pinned_packages(tmp_path: Path) -> None:
    """What provision.sh step 4 runs, minus Debian's interpreter: venv.sh --with vm --project <copy>."""
    python39 = need_python39()
    project = tmp_path / "project"  # a copy: an editable install writes egg-info into the project
    keep = ("pyproject.toml", "README.md", "echelonflow", "controller", "topologies", "simulator",
            "traffic", "emulation", "reports", "cli", "vagrant")
    project.mkdir()
    for name in keep:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, project / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        elif src.exists():
            shutil.copy2(src, project / name)
    venv = tmp_path / "opt-echelon"
    cmd = ["bash", str(project / "vagrant" / "venv.sh"), "--python", python39, "--venv", str(venv),
           "--project", str(project), "--with", "vm"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]

    freeze = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "freeze", "--all", "--exclude-editable"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    table = pins()
    unpinned = sorted(line for line in freeze
                      if table.get(normalise(line.split("==")[0])) != line.split("==")[1])
    assert not unpinned, f"installed but not pinned in vagrant/requirements-vm.txt: {unpinned}"
    assert "echelonflow" not in {normalise(line.split("==")[0]) for line in freeze}

    echelon = subprocess.run([str(venv / "bin" / "echelon"), "--help"], capture_output=True, text=True,
                             cwd=tmp_path)
    assert echelon.returncode == 0 and "usage: echelon" in echelon.stdout, echelon.stderr
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import controller.compat as c, echelonflow, matplotlib, scapy; "
         "print(c.FRAMEWORK, echelonflow.__file__)"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    framework, location = probe.stdout.split()
    assert framework == "ryu" and location.startswith(str(project)), probe.stdout

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "up to date" in again.stderr, again.stderr
