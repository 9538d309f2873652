"""Nothing lost, no traceback: the emulation survives a failed fabric start, keeps finished scheduler runs
when it dies or is interrupted, and the controller-reachability check cannot crash on odd bytes."""

from __future__ import annotations

import socket
import threading

import pytest

# The first bytes an OpenFlow 1.3 controller sends (HELLO) plus bytes that are not UTF-8 at all:
# Mininet's telnet-based check decoded them as text and raised UnicodeDecodeError.
ODD_BYTES = bytes([0x04, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x01,
                   0xFF, 0xFE, 0x80, 0xC3, 0x28, 0xA0, 0xA1, 0xE2])


class _OddListener:
    """A TCP listener on loopback that greets every connection with ``ODD_BYTES`` and closes it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            with conn:
                conn.sendall(ODD_BYTES * 64)

    def close(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() above
        self.sock.close()
        self._thread.join(timeout=5)


@pytest.mark.fabric
def test_controller_reachability_check_survives_binary_greetings(require_fabric):
    from mininet.node import Node

    from topologies.fabric import _controller_class, controller_listening

    listener = _OddListener()
    try:
        assert controller_listening("127.0.0.1", listener.port)
        for i in range(10):
            node = _controller_class()(f"c{i}", ip="127.0.0.1", port=listener.port)  # checks on creation
            Node.terminate(node)
        assert listener.accepted >= 11  # every construction really connected
    finally:
        listener.close()
    with socket.socket() as unused:  # bound, never listening: connections are refused
        unused.bind(("127.0.0.1", 0))
        closed = unused.getsockname()[1]
        assert not controller_listening("127.0.0.1", closed)
        node = _controller_class()("c-absent", ip="127.0.0.1", port=closed)  # warns, does not raise
        Node.terminate(node)
