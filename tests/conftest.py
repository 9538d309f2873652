"""Shared test fixtures, and the test tiers (docs/testing.md).

A test's tier follows from the fixtures it uses (``pytest_collection_modifyitems`` below): one that
uses ``require_fabric`` is marked ``fabric``, ``require_controller`` ``controller``, ``require_browser``
``browser``, ``venv39`` ``py39``; a test with none of the tier markers (nor an explicit ``slow`` or
``reference``) is marked ``unit``, and ``tests/run --quick`` runs those (``-m unit``).  A unit-tier test
that takes more than ``UNIT_BUDGET_S`` of CPU fails, naming itself: the quick tier stays quick.
``reference`` tests (the full-size runs whose numbers docs/results.md carries) run only when asked for
(``tests/run --full``, ``-m reference`` or their node id).

Fabric tests need root, Open vSwitch and Mininet; browser tests need Debian's chromium, its chromedriver
and selenium (all installed by ``bootstrap.sh --test``).  Outside CI a machine without them skips those
tests with the reason; under ``CI=true`` a missing prerequisite is a failure, because a skipped
suite proves nothing.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.helpers import ROOT, unix_socket_listening

IN_CI = os.environ.get("CI", "").lower() == "true"

# A suite started as a background job (``cmd &`` in a script) inherits SIGINT ignored, and so would
# every process the tests start; the tests of what Ctrl-C does need it delivered, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def fabric_missing_reason() -> str:
    """Why a real fabric cannot run here, or '' if it can."""
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("ovs-vsctl", "ovs-ofctl", "mnexec", "tc", "ethtool"):
        if shutil.which(tool) is None:
            return f"needs {tool} on PATH"
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return "needs the mininet Python module"
    return ""


def need(what: str, reason: str) -> None:
    """Skip because ``reason`` (outside CI), or fail (``CI=true``: a skipped suite proves nothing)."""
    if reason:
        if IN_CI:
            pytest.fail(f"CI=true but {what} cannot run: {reason}")
        pytest.skip(reason, allow_module_level=True)


def need_tool(name: str) -> str:
    """The path of the program ``name``, or skip (fail under ``CI=true``) because it is not installed."""
    path = shutil.which(name)
    need(name, "" if path else f"{name} is not installed (bash bootstrap.sh --test installs it)")
    return path or ""


#: Where this project's machines keep a Python 3.9 (pyenv's), besides $ECHELON_PYTHON39 and PATH.
PYTHON39_CANDIDATES = ("/root/.pyenv/versions/3.9.18/bin/python3.9",)


def find_python39() -> str:
    """A Python 3.9 interpreter ($ECHELON_PYTHON39, pyenv's 3.9.18 or python3.9 on PATH), or ''."""
    candidates = [os.environ.get("ECHELON_PYTHON39", ""), *PYTHON39_CANDIDATES,
                  shutil.which("python3.9") or ""]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), "")


def need_python39() -> str:
    """A Python 3.9 interpreter, or skip (fail under ``CI=true``)."""
    python39 = find_python39()
    need("Python 3.9", "" if python39 else "no Python 3.9 interpreter (set ECHELON_PYTHON39)")
    return python39


@pytest.fixture(scope="session")
def require_fabric() -> None:
    need("the fabric", fabric_missing_reason())


CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def browser_missing_reason() -> str:
    """Why a real browser cannot run here, or '' if it can."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"needs {path} (Debian's chromium and chromium-driver; bootstrap.sh --test installs them)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "needs selenium in the venv (bootstrap.sh --test installs it)"
    return ""


@pytest.fixture(scope="session")
def require_browser() -> None:
    need("the browser", browser_missing_reason())


@pytest.fixture
def occupied(tmp_path):
    """What a refused server start must leave as it was: a token file holding a running controller's
    token, a regular file where a socket is asked for, and a busy loopback TCP port."""
    import socket
    from types import SimpleNamespace

    token = tmp_path / "token"
    token.write_text("the running controller's token\n")
    plain = tmp_path / "plain"
    plain.write_text("not a socket")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        yield SimpleNamespace(token=token, plain=plain, port=busy.getsockname()[1])
    finally:
        busy.close()


@pytest.fixture(scope="session")
def require_controller() -> None:
    """For a test that starts the controller process (osken-manager): puts it in the ``controller`` tier."""


# --------------------------------------------------------------------------------------------- tiers
#: Tier markers: what each means, and the fixtures that put a test in it (a fixture anywhere in the
#: test's fixture closure counts, so a module fixture that requests ``require_fabric`` marks its users).
TIERS: dict[str, tuple[str, frozenset[str]]] = {
    "fabric": ("needs root, Open vSwitch and Mininet (a real emulated fabric)",
               frozenset({"require_fabric"})),
    "controller": ("starts the controller process (osken-manager)", frozenset({"require_controller"})),
    "browser": ("drives Debian's chromium through chromedriver (selenium)",
                frozenset({"require_browser"})),
    "py39": ("runs the Python 3.9 venv (a nested interpreter)", frozenset({"venv39"})),
    "slow": ("takes more than a few seconds (a nested interpreter, a CLI run, a big simulation)",
             frozenset()),
    "reference": ("a full-size run whose numbers docs/results.md carries; only with tests/run --full",
                  frozenset()),
    "serial": ("runs alone in tests/run's serial pass (with the fabric and browser tiers): it measures a "
               "time a busy neighbour would disturb, or cleans up what other tests' processes left",
               frozenset()),
}
UNIT = "unit"
#: CPU seconds (the test process's, all threads, plus its reaped children's) a unit-tier test may take.
#: CPU rather than wall time: a busy machine stretches wall time several-fold but CPU time little.
UNIT_BUDGET_S = float(os.environ.get("ECHELON_UNIT_BUDGET_S", "10"))
#: A unit-tier test that waits or sleeps (little CPU) fails once its wall time passes this multiple of
#: the budget while it was on a CPU less than ``UNIT_IDLE_SHARE`` of it.  The share tells waiting from
#: starving: a 2-core machine running a dozen busy processes stretched CPU-bound tests' wall time
#: ten-fold (10 % on a CPU), where a sleeping test is on one well under 5 %.
UNIT_WALL_FACTOR = 6.0
UNIT_IDLE_SHARE = 0.05


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full", action="store_true",
                     help="also run the reference tier (full-size runs; tests/run --full)")


def pytest_configure(config: pytest.Config) -> None:
    for marker, (meaning, _fixtures) in TIERS.items():
        config.addinivalue_line("markers", f"{marker}: {meaning}")
    config.addinivalue_line("markers", f"{UNIT}: none of the tiers above (applied by tests/conftest.py; "
                                       "tests/run --quick runs these)")


def tier_markers(fixturenames: set[str], own_markers: set[str]) -> set[str]:
    """The tier markers a test gets: its own plus those of the fixtures it uses; ``unit`` if none."""
    tiers = {marker for marker, (_meaning, fixtures) in TIERS.items()
             if marker in own_markers or fixtures & fixturenames}
    return tiers or {UNIT}


def _named(config: pytest.Config, item: pytest.Item) -> bool:
    """Whether the command line names ``item`` by its node id (``tests/test_x.py::test_y``)."""
    for arg in config.args:
        path, sep, rest = arg.partition("::")
        if sep:
            where = (config.invocation_params.dir / path).resolve()
            if where.is_relative_to(config.rootpath) and item.nodeid.startswith(
                    f"{where.relative_to(config.rootpath).as_posix()}::{rest}"):
                return True
    return False


def _reference_wanted(config: pytest.Config, item: pytest.Item) -> bool:
    """The reference tier runs with --full, under an -m that names it, or when its node id is given."""
    return (config.getoption("full") or "reference" in (config.getoption("markexpr") or "")
            or _named(config, item))


@pytest.hookimpl(tryfirst=True)  # before -m selects on the markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, dropped = [], []
    for item in items:
        own = {mark.name for mark in item.iter_markers()}
        for marker in sorted(tier_markers(set(getattr(item, "fixturenames", ())), own) - own):
            item.add_marker(marker)
        if "reference" in own and not _reference_wanted(config, item):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


_SPENT = pytest.StashKey[tuple]()


def _cpu_s() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    start = (_cpu_s(), time.monotonic())
    yield
    item.stash[_SPENT] = (_cpu_s() - start[0], time.monotonic() - start[1])


def over_budget(cpu_s: float, wall_s: float, budget_s: float = UNIT_BUDGET_S) -> str:
    """Why a unit-tier test that took ``cpu_s`` of CPU and ``wall_s`` of wall time is over its budget,
    or ''."""
    if budget_s <= 0:
        return ""
    if cpu_s > budget_s:
        return f"took {cpu_s:.1f} s of CPU"
    if wall_s > budget_s * UNIT_WALL_FACTOR and cpu_s < wall_s * UNIT_IDLE_SHARE:
        return f"took {wall_s:.1f} s of wall time (only {cpu_s:.1f} s of CPU: waiting or sleeping?)"
    return ""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A passing unit-tier test over its budget fails, naming itself: mark it ``slow`` (or give it the
    fixture of its tier) or make it cheaper."""
    outcome = yield
    report = outcome.get_result()
    if call.when != "call" or not report.passed or item.get_closest_marker(UNIT) is None:
        return
    why = over_budget(*item.stash.get(_SPENT, (0.0, 0.0)))
    if why:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} is in the unit tier (tests/run --quick) but {why}; the "
                           f"budget is {UNIT_BUDGET_S:g} s of CPU ({UNIT_WALL_FACTOR:g}x that of wall "
                           "time when idle): make it cheaper, or mark it slow (docs/testing.md)")


@pytest.fixture
def registry_server(tmp_path):
    """The controller's real API server (registry + scheduling service, no OpenFlow fabric) on a fat-tree
    k=4 at 10 Mbit/s: (its Unix socket, its token file)."""
    sock_path, token = str(tmp_path / "api.sock"), str(tmp_path / "token")
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    argv = [sys.executable, "-m", "controller.api_server", "--topology", "fattree", "--k", "4",
            "--rate-mbps", "10", "--port", str(port), "--socket", sock_path, "--token-file", token,
            "--interval-s", "0.1"]
    with open(tmp_path / "api.log", "w") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while not unix_socket_listening(sock_path):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "api.log").read_text()
            time.sleep(0.05)
        yield sock_path, token
    finally:
        proc.terminate()
        proc.wait(10)
