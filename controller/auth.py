"""The API's bearer token: made fresh at every controller start, kept in a root-only file.

State-changing calls need ``Authorization: Bearer <token>``; reads are open.  The token file is the
only way to learn the token, so whoever may change the schedule must be able to read it (root on this
machine; Mininet hosts run as root and share the file system).

Kept Python 3.9 compatible; stdlib and the core's atomic writer only.
"""

from __future__ import annotations

import hmac
import os
import secrets

from echelonflow.fileio import write_text_atomic

DEFAULT_TOKEN_PATH = "/run/echelon/token"


class TokenError(Exception):
    """The token file cannot be written or read."""


def generate_token() -> str:
    return secrets.token_urlsafe(32)


def write_token(path: str, token: str) -> None:
    """Write ``token`` to ``path`` with mode 0600 (directory 0700 if created), replacing it atomically."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
        write_text_atomic(path, token + "\n", mode=0o600)
    except OSError as exc:
        raise TokenError(f"cannot write API token file {path!r}: {exc.strerror}") from None


def read_token(path: str = DEFAULT_TOKEN_PATH) -> str:
    try:
        with open(path, encoding="ascii") as handle:
            token = handle.read().strip()
    except OSError as exc:
        raise TokenError(f"cannot read API token file {path!r}: {exc.strerror}") from None
    if not token:
        raise TokenError(f"API token file {path!r} is empty")
    return token


def bearer_ok(header: str | None, token: str) -> bool:
    """True if an ``Authorization`` header carries exactly this token (constant-time compare)."""
    if not header or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer "):].strip().encode(), token.encode())
