"""Open vSwitch and ``ip`` at arm's length: batched ``ovs-vsctl`` writes, JSON OVSDB reads, the daemons.

Used by the fabric, its cleanup and the demo's set-up check; imports no Mininet, so checking or
starting OVS never loads it.  OVSDB is read with ``ovs-vsctl --format=json`` and decoded (never by
splitting CSV on commas: maps and sets carry commas and quotes of their own).

Why batched: one ``ovs-vsctl`` process per row would make a k=8 fat-tree (80 bridges, 640 ports) take
minutes; OVSDB accepts many ``--``-separated commands in one transaction, so we group commands up to a
safe command-line length.

Every row we create carries ``external_ids:echelon-owner=<tag>`` so cleanup can find exactly ours (OVSDB
keeps QoS/Queue rows after their bridge is gone).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from typing import Any

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
    Output lines (e.g. uuids printed by ``create``) are returned in order.  ``timeout_s`` bounds each
    transaction, including ovs-vswitchd applying it: ovs-vsctl's own alarm gets the whole of it (a busy
    userspace datapath can take minutes to reconfigure many bridges), our wait a little more.
    """
    argv0 = ["ovs-vsctl", f"--timeout={max(1, round(timeout_s))}"]
    out: list[str] = []
    batch: list[str] = []
    size = 0
    for cmd in commands:
        cost = sum(len(a) + 1 for a in cmd) + 4
        if batch and size + cost > MAX_ARGS_CHARS:
            out.extend(run(argv0 + batch, timeout_s=timeout_s + 10).splitlines())
            batch, size = [], 0
        batch += ["--"] + list(cmd)
        size += cost
    if batch:
        out.extend(run(argv0 + batch, timeout_s=timeout_s + 10).splitlines())
    return out


def list_bridges() -> list[str]:
    return run(["ovs-vsctl", "--timeout=10", "list-br"]).split()


def list_rows(table: str, columns: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of an OVSDB table as ``{column: value}``, read with ``ovs-vsctl --format=json``.

    Values are decoded from OVSDB's JSON notation: a uuid becomes its string, a map a dict, a set a
    list (a one-element set arrives as the bare atom and becomes a one-element list too when the
    column is a set of references such as ``controller``; callers ask :func:`as_list` when unsure).
    """
    text = run(["ovs-vsctl", "--timeout=10", "--format=json", "--data=json",
                f"--columns={','.join(columns)}", "list", table])
    try:
        doc = json.loads(text)
        return [{name: _decode(value) for name, value in zip(doc["headings"], row)} for row in doc["data"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise OvsError(f"ovs-vsctl list {table}: unexpected output ({exc})") from None


def _decode(value: Any) -> Any:
    """One OVSDB JSON datum as plain Python: ["uuid", u] -> u, ["map", pairs] -> dict, ["set", xs] -> list."""
    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
        kind, body = value
        if kind in ("uuid", "named-uuid"):
            return body
        if kind == "map":
            return {_decode(k): _decode(v) for k, v in body}
        if kind == "set":
            return [_decode(v) for v in body]
    return value


def as_list(value: Any) -> list[Any]:
    """A set column's value as a list (OVSDB sends a one-element set as the bare element)."""
    return value if isinstance(value, list) else [value]


def rows_owned(table: str, tag: str = "") -> dict[str, str]:
    """uuid -> owner tag of rows in ``table`` tagged with ``echelon-owner`` (any tag if ``tag`` is '')."""
    return _owned(table, "_uuid", tag)


def bridges_owned(tag: str = "") -> dict[str, str]:
    """bridge name -> owner tag for bridges tagged ``echelon-owner`` (any tag if ``tag`` is '')."""
    return _owned("Bridge", "name", tag)


def _owned(table: str, key_column: str, tag: str) -> dict[str, str]:
    """``key_column`` value -> owner tag of the ``table`` rows carrying :data:`OWNER_KEY` (``tag`` if set)."""
    found: dict[str, str] = {}
    for row in list_rows(table, (key_column, "external_ids")):
        owner = row["external_ids"].get(OWNER_KEY)
        if owner is not None and (not tag or owner == tag):
            found[row[key_column]] = owner
    return found


def limit_packet_ins(bridges: Iterable[str], rate_pps: int, burst: int) -> int:
    """Cap what each bridge sends its controller at ``rate_pps`` packets/s (``burst`` saved up).

    OVS's ``controller_rate_limit`` (``Controller`` table; at least 100 and 25) queues packet-ins per
    input port and serves the ports in turn, so one host flooding ARP uses up only its own port's share:
    routing set-up for the other ports of that switch still gets through.  Returns the rows set.
    """
    wanted = set(bridges)
    refs = [ref for row in list_rows("Bridge", ("name", "controller")) if row["name"] in wanted
            for ref in as_list(row["controller"])]
    vsctl_transactions([["set", "Controller", ref, f"controller_rate_limit={int(rate_pps)}",
                         f"controller_burst_limit={int(burst)}"] for ref in refs])
    return len(refs)


def connected_bridges() -> set[str]:
    """Names of bridges with at least one connected controller."""
    connected = {row["_uuid"] for row in list_rows("Controller", ("_uuid", "is_connected"))
                 if row["is_connected"] is True}
    return {row["name"] for row in list_rows("Bridge", ("name", "controller"))
            if any(ref in connected for ref in as_list(row["controller"]))}


# --------------------------------------------------------------------------- the OVS daemons
OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"


def ovs_running() -> bool:
    """Do ovsdb-server and ovs-vswitchd answer (``ovs-vsctl show`` succeeds)?"""
    try:
        proc = subprocess.run(["ovs-vsctl", "--timeout=5", "show"], capture_output=True, text=True,
                              timeout=30)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def ensure_ovs_running() -> None:
    """Start ovsdb-server and ovs-vswitchd with ovs-ctl if they do not answer (no systemd here)."""
    if ovs_running():
        return
    if not os.path.exists(OVS_CTL):
        raise OvsError(f"Open vSwitch is not running and {OVS_CTL} is missing (install openvswitch)")
    proc = subprocess.run([OVS_CTL, "start", "--system-id=random"], capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0 or not ovs_running():
        raise OvsError(f"could not start Open vSwitch: {(proc.stderr or proc.stdout).strip()[-300:]}")


#: Where ovs-ctl keeps ovs-vswitchd's pidfile (``/var/run`` is a link to ``/run`` here).
VSWITCHD_PIDFILES = ("/var/run/openvswitch/ovs-vswitchd.pid", "/run/openvswitch/ovs-vswitchd.pid")


def vswitchd_pidfile_pid() -> int | None:
    """ovs-vswitchd's pid as its pidfile says, None without a pidfile naming a live process.

    Only the pidfile: stopping the daemon must hit the one this machine's OVS started, never something
    that merely has its name.
    """
    for path in VSWITCHD_PIDFILES:
        try:
            with open(path, encoding="ascii") as fh:
                pid = int(fh.read().strip())
        except (OSError, ValueError):
            continue
        if os.path.exists(f"/proc/{pid}"):
            return pid
    return None


def stop_vswitchd(timeout_s: float = 10.0) -> int:
    """Stop ovs-vswitchd: ``ovs-appctl exit`` on its control socket, then SIGTERM and SIGKILL of that pid
    if it lingers.  Returns the pid stopped; :class:`OvsError` if none runs or it would not go.

    ``exit`` without ``--cleanup`` leaves OVSDB alone (bridges, ports, controllers, QoS and Queue rows stay)
    and the kernel's devices too (the veths, their MTU and their htb qdiscs); what goes with the process is
    everything the userspace datapath held: flow tables, meters, the bridges' internal ports, the packet
    sockets on every port.  ovs-ctl starts the daemon under ``--monitor``, whose watchdog restarts it after
    a crash but not after a clean exit.
    """
    pid = vswitchd_pidfile_pid()
    if pid is None:
        raise OvsError("ovs-vswitchd is not running (no pidfile naming a live process)")
    control = os.path.join(os.path.dirname(VSWITCHD_PIDFILES[0]), f"ovs-vswitchd.{pid}.ctl")
    run(["ovs-appctl", "-t", control, "exit"], check=False, timeout_s=timeout_s)
    deadline = time.monotonic() + timeout_s
    for signum in (None, signal.SIGTERM, signal.SIGKILL):
        if signum is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
            deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not _alive(pid):
                return pid
            time.sleep(0.01)
    raise OvsError(f"ovs-vswitchd (pid {pid}) did not stop, not even on SIGKILL")


def _alive(pid: int) -> bool:
    """Is ``pid`` a process that has not ended (a zombie counts as ended)?"""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def start_vswitchd(timeout_s: float = 60.0) -> int:
    """Start ovs-vswitchd alone, as :func:`ensure_ovs_running` starts it (``ovs-ctl``, ovsdb-server left
    running); returns its pid (ovs-ctl returns once the daemon has detached and written its pidfile).
    Its bridges and ports come back as it reads OVSDB: :func:`datapath_ports` says which are there."""
    if not os.path.exists(OVS_CTL):
        raise OvsError(f"{OVS_CTL} is missing (install openvswitch)")
    proc = subprocess.run([OVS_CTL, "--no-ovsdb-server", "start"], capture_output=True, text=True,
                          timeout=timeout_s)
    pid = vswitchd_pidfile_pid()
    if proc.returncode != 0 or pid is None:
        said = (proc.stderr or proc.stdout).strip()[-300:]
        raise OvsError(f"could not start ovs-vswitchd: {said or 'no pidfile after ovs-ctl start'}")
    return pid


def datapath_ports() -> dict[str, set[str]]:
    """Bridge -> the ports ovs-vswitchd has opened in its datapath (``ovs-appctl dpif/show``), the
    bridge's own internal port left out; {} while the daemon does not answer."""
    return parse_dpif_show(run(["ovs-appctl", "--timeout=5", "dpif/show"], check=False, timeout_s=10))


def parse_dpif_show(text: str) -> dict[str, set[str]]:
    """``ovs-appctl dpif/show``'s text -> bridge -> its ports but the bridge's own.  The datapath
    (``netdev@ovs-netdev: hit:244 missed:92``) is not indented, its bridges (``  e1:``) are, and their
    ports (``    e1-eth1 1/2: (system)``) more."""
    bridges: dict[str, set[str]] = {}
    bridge = None
    for line in text.splitlines():
        depth = len(line) - len(line.lstrip())
        if not depth or not line.strip():
            bridge = None
            continue
        name = line.split()[0].rstrip(":")
        if line.rstrip().endswith(":") and " " not in line.strip():
            bridge = name
            bridges[bridge] = set()
        elif bridge is not None and name != bridge:
            bridges[bridge].add(name)
    return bridges


def kernel_datapath_available() -> bool:
    """Is the openvswitch kernel module loaded or installed for the running kernel?"""
    if os.path.isdir("/sys/module/openvswitch"):
        return True
    release = os.uname().release
    for root, _dirs, files in os.walk(f"/lib/modules/{release}"):
        if any(f.startswith("openvswitch.ko") for f in files) and "net/openvswitch" in root:
            return True
    return False


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


# --------------------------------------------------------------------------- userspace datapath tx buffer
#: Send buffer for ovs-vswitchd's shared AF_PACKET transmit socket (see :func:`ensure_tx_buffer`).
TX_BUFFER_BYTES = 16 * 1024 * 1024
_SO_SNDBUFFORCE = 32  # Linux; lets root exceed net.core.wmem_max
_SYS_PIDFD_GETFD = 438  # same number on every Linux architecture (since 5.6)


def vswitchd_pid() -> int | None:
    """The one ovs-vswitchd's pid (from its pidfile, else /proc), None if it is not running."""
    for path in ("/var/run/openvswitch/ovs-vswitchd.pid", "/run/openvswitch/ovs-vswitchd.pid"):
        try:
            with open(path, encoding="ascii") as fh:
                pid = int(fh.read().strip())
            if os.path.exists(f"/proc/{pid}"):
                return pid
        except (OSError, ValueError):
            continue
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm", encoding="ascii") as fh:
                    if fh.read().strip() == "ovs-vswitchd":
                        return int(entry)
            except OSError:
                continue
    return None


def socket_fds(pid: int) -> dict[int, int]:
    """The sockets ``pid`` holds open: inode -> its descriptor number in ``pid`` ({} if /proc hides them)."""
    out = {}
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out[int(target[8:-1])] = int(name)
    return out


def _packet_tx_inodes(pid: int) -> set[int]:
    """Inodes of ``pid``'s AF_PACKET sockets bound to no interface (the userspace datapath's tx socket)."""
    inodes = set()
    try:
        with open(f"/proc/{pid}/net/packet", encoding="ascii") as fh:
            next(fh, None)
            for line in fh:
                parts = line.split()
                if len(parts) >= 9 and parts[4] == "0":  # Iface 0: not bound, used for sending
                    inodes.add(int(parts[8]))
    except OSError:
        pass
    return inodes


def ensure_tx_buffer(min_bytes: int = TX_BUFFER_BYTES) -> int | None:
    """Raise the send buffer of ovs-vswitchd's packet transmit socket to at least ``min_bytes``.

    Why: on the userspace datapath every port transmits through ONE non-blocking AF_PACKET socket, and a
    packet sitting in any port's htb queue stays charged to that socket's send buffer until it leaves.
    With the default buffer (net.core.wmem_default, 208 KiB: ~90 full frames) a few backed-up queues
    exhaust it and ovs-vswitchd drops packets for *every* port (EAGAIN, "error sending Ethernet packet"
    in its log): 4-5 % loss on a fat-tree run, SYNs included (1 s and 3 s retransmission timeouts).
    ovs-vswitchd never sets SO_SNDBUF itself, so we set it from outside on a duplicate of its descriptor
    (pidfd_getfd; needs root and Linux >= 5.6) without restarting OVS.  The socket is created on the
    first transmitted packet: returns None if it does not exist yet (call again after traffic flowed),
    else the buffer size now in force (as the kernel reports it: twice the value set).
    """
    import ctypes
    import socket

    pid = vswitchd_pid()
    if pid is None:
        return None
    wanted = _packet_tx_inodes(pid)
    tx_fds = [fd for inode, fd in socket_fds(pid).items() if inode in wanted]
    if not tx_fds:
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    size = None
    try:
        for their_fd in tx_fds:
            fd = libc.syscall(_SYS_PIDFD_GETFD, pidfd, their_fd, 0)
            if fd < 0:
                err = ctypes.get_errno()
                raise OvsError(f"cannot reach ovs-vswitchd's packet socket: {os.strerror(err)}")
            sock = socket.socket(fileno=fd)
            try:
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) < 2 * min_bytes:
                    sock.setsockopt(socket.SOL_SOCKET, _SO_SNDBUFFORCE, min_bytes)
                size = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
            finally:
                sock.close()  # closes our duplicate only
    finally:
        os.close(pidfd)
    return size
