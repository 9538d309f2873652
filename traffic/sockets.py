"""Ending a socket that another thread may still be blocked on, the same way on both agent planes.

The control plane (``traffic.control``, Unix datagrams) and the data plane (``traffic.transfer``, TCP
channels) each keep sockets that a daemon thread sits in ``recv``/``accept`` on.  ``close`` alone does
not wake that thread on Linux; ``shutdown`` does, and it fails harmlessly on a socket the peer already
ended, so the two always go together.
"""

from __future__ import annotations

import contextlib
import socket


def shut_and_close(sock: socket.socket, how: int = socket.SHUT_RDWR) -> None:
    """``shutdown(how)`` (wakes a thread blocked on ``sock``; ``SHUT_WR`` tells the peer "no more"), then
    close; a shutdown refused because the connection is already gone is fine."""
    with contextlib.suppress(OSError):
        sock.shutdown(how)
    sock.close()
