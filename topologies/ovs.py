"""Thin, batched wrappers around ``ovs-vsctl`` and ``ip``/``tc`` used by the fabric and its cleanup.

Why batched: one ``ovs-vsctl`` process per row would make a k=8 fat-tree (80 bridges, 640 ports) take
minutes; OVSDB accepts many ``--``-separated commands in one transaction, so we group commands up to a
safe command-line length.

Every row we create carries ``external_ids:echelon-owner=<tag>`` so cleanup can find exactly ours (OVSDB
keeps QoS/Queue rows after their bridge is gone).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Sequence

OWNER_KEY = "echelon-owner"
MAX_ARGS_CHARS = 100000  # well below ARG_MAX; one transaction per chunk


class OvsError(RuntimeError):
    """An ovs-vsctl/tc/ip command failed; the message includes the command and its stderr."""


def run(argv: Sequence[str], check: bool = True, timeout_s: float = 60.0) -> str:
    """Run a command, return stdout; raise :class:`OvsError` with stderr on failure when ``check``."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError as exc:
        raise OvsError(f"{argv[0]} is not installed ({exc})") from None
    except subprocess.TimeoutExpired:
        raise OvsError(f"{' '.join(argv[:4])} ... timed out after {timeout_s:.0f} s") from None
    if check and proc.returncode != 0:
        short = " ".join(argv[:6]) + (" ..." if len(argv) > 6 else "")
        raise OvsError(f"`{short}` failed (exit {proc.returncode}): {proc.stderr.strip()[:500]}")
    return proc.stdout


def vsctl_transactions(commands: Iterable[list[str]], timeout_s: float = 120.0) -> list[str]:
    """Run ovs-vsctl commands (each a list of args) in as few transactions as fit; return stdout lines.

    Each element of ``commands`` is one vsctl command (e.g. ``["--if-exists", "del-br", "e1"]``).
    Output lines (e.g. uuids printed by ``create``) are returned in order.
    """
    out: list[str] = []
    batch: list[str] = []
    size = 0
    for cmd in commands:
        cost = sum(len(a) + 1 for a in cmd) + 4
        if batch and size + cost > MAX_ARGS_CHARS:
            out.extend(run(["ovs-vsctl", "--timeout=60"] + batch, timeout_s=timeout_s).splitlines())
            batch, size = [], 0
        batch += ["--"] + list(cmd)
        size += cost
    if batch:
        out.extend(run(["ovs-vsctl", "--timeout=60"] + batch, timeout_s=timeout_s).splitlines())
    return out


def list_bridges() -> list[str]:
    return run(["ovs-vsctl", "--timeout=10", "list-br"]).split()


def rows_owned(table: str, tag: str = "") -> dict[str, str]:
    """uuid -> owner tag of rows in ``table`` tagged with ``echelon-owner`` (any tag if ``tag`` is '')."""
    text = run(
        ["ovs-vsctl", "--timeout=10", "--format=csv", "--no-headings", "--data=bare",
         "--columns=_uuid,external_ids", "list", table]
    )
    found: dict[str, str] = {}
    for line in text.splitlines():
        uuid, _, ext = line.partition(",")
        owner = _ext_value(ext, OWNER_KEY)
        if owner is not None and (not tag or owner == tag):
            found[uuid.strip()] = owner
    return found


def bridges_owned(tag: str = "") -> dict[str, str]:
    """bridge name -> owner tag for bridges tagged ``echelon-owner`` (any tag if ``tag`` is '')."""
    text = run(
        ["ovs-vsctl", "--timeout=10", "--format=csv", "--no-headings", "--data=bare",
         "--columns=name,external_ids", "list", "Bridge"]
    )
    found: dict[str, str] = {}
    for line in text.splitlines():
        name, _, ext = line.partition(",")
        owner = _ext_value(ext, OWNER_KEY)
        if owner is not None and (not tag or owner == tag):
            found[name.strip().strip('"')] = owner
    return found


def _ext_value(ext: str, key: str):
    """Value of ``key`` in a bare-format csv map cell like ``"a=b c=d"`` (or None)."""
    for item in ext.strip().strip('"').split():
        k, _, v = item.partition("=")
        if k == key:
            return v
    return None


def existing_links() -> list[str]:
    """Names of network interfaces in the root namespace."""
    names = []
    for line in run(["ip", "-o", "link", "show"]).splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def delete_links(names: Iterable[str]) -> None:
    """Delete the given root-namespace interfaces that still exist (deleting a veth end removes its peer)."""
    present = set(existing_links())
    todo = [n for n in names if n in present]
    if not todo:
        return
    script = "".join(f"link del dev {n}\n" for n in todo)
    # -force: keep going past interfaces that vanished meanwhile (a peer deleted with its partner).
    subprocess.run(["ip", "-force", "-batch", "-"], input=script, text=True, capture_output=True, timeout=120)
