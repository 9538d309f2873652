"""Calibration traffic: TCP streams between fabric hosts, as cheap on the CPU as a stream can be.

``python -m traffic.loadgen SPEC_JSON`` runs inside one host's namespace: it listens on the ports in
``listen`` (one stream each), waits until ``start_at`` (epoch s), connects to every ``[ip, port]`` in
``send`` and writes zeros through blocking sockets for ``seconds``, then prints
``{"received": {port: {"bytes": n, "seconds": s}}}`` for the streams it received.  Blocking calls of
256 KiB each keep a stream's cost near nothing; iperf3 was tried first and its clients took 6-20 % of a
core each (38 of them pegged this 2-core machine on their own), which measured the load generator rather
than the fabric (docs/emulation.md, "Time dilation").
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from typing import Any

CHUNK_BYTES = 256 * 1024
CONNECT_GRACE_S = 5.0  # a peer may start listening this long after start_at


def _receive(server: socket.socket, port: int, out: dict[int, dict[str, float]], deadline_s: float) -> None:
    server.settimeout(max(0.1, deadline_s - time.time()))
    try:
        conn, _addr = server.accept()
    except OSError:
        return
    with conn:
        conn.settimeout(max(0.1, deadline_s - time.time()))
        total, first_s, last_s = 0, None, None
        buf = bytearray(CHUNK_BYTES)
        try:
            while True:
                n = conn.recv_into(buf)
                if n == 0:
                    break
                last_s = time.time()
                first_s = first_s or last_s
                total += n
        except OSError:
            pass
    out[port] = {"bytes": total, "seconds": (last_s - first_s) if first_s and last_s else 0.0}


def _send(ip: str, port: int, start_s: float, seconds: float) -> None:
    payload = bytes(CHUNK_BYTES)
    sock = None
    while sock is None:
        try:
            sock = socket.create_connection((ip, port), timeout=2.0)
        except OSError:
            if time.time() > start_s + CONNECT_GRACE_S:
                return
            time.sleep(0.05)
    with sock:
        sock.settimeout(seconds + 10.0)
        end_s = time.time() + seconds
        try:
            while time.time() < end_s:
                sock.sendall(payload)
        except OSError:
            return


def run(spec: dict[str, Any]) -> dict[str, Any]:
    seconds, start_s = float(spec["seconds"]), float(spec["start_at"])
    deadline_s = start_s + seconds + CONNECT_GRACE_S + 20.0
    received: dict[int, dict[str, float]] = {}
    threads = []
    for port in spec.get("listen", []):
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("0.0.0.0", int(port)))
        server.listen(1)
        threads.append(threading.Thread(target=_receive, args=(server, int(port), received, deadline_s),
                                        daemon=True))
    for thread in threads:
        thread.start()
    time.sleep(max(0.0, start_s - time.time()))
    senders = [threading.Thread(target=_send, args=(ip, int(port), start_s, seconds), daemon=True)
               for ip, port in spec.get("send", [])]
    for thread in senders:
        thread.start()
    for thread in senders + threads:
        thread.join(timeout=max(0.1, deadline_s - time.time()))
    return {"received": {str(port): value for port, value in received.items()}}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m traffic.loadgen SPEC_JSON", file=sys.stderr)
        return 2
    print(json.dumps(run(json.loads(argv[0]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
