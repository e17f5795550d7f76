"""The mark on the reference an external effect carries, which no sandbox can make.

An unsafe call tells the external system which operation it is (a ticket's `client_ref`), so that
a later attempt whose result was lost can ask whether it took effect. Whoever else can write to
that system (an `internet` sandbox, a local process, a person with access to the tracker) can
write the same reference. So the reference is the operation id followed by a mark,

    <operation id>~<HMAC-SHA256(key, session id, operation id) as 64 hex digits>

under a key held outside every sandbox (on one machine a file in the home, mode 0600; in a
cluster one derived from the record key). Reconciliation takes as done only an effect whose
reference carries the exact mark of its own session and operation; one that names the operation
without it (no mark, a wrong one, one copied from another session or operation) is shown for a
person to reconcile, never taken as done.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
from pathlib import Path

SEPARATOR = "~"
MIN_KEY_BYTES = 32
_DOMAIN = b"belay effect reference v1"


class EffectKeyError(Exception):
    """The key file cannot be used; the message says which file and why."""


class EffectMarks:
    """The references of one session's effects, made and checked under one key."""

    def __init__(self, key: bytes, session_id: str) -> None:
        self._key = key
        self.session_id = session_id

    def _mark(self, operation_id: str) -> str:
        message = b"\0".join((_DOMAIN, self.session_id.encode(), operation_id.encode()))
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def reference(self, operation_id: str) -> str:
        """What the effect of `operation_id` carries (a ticket's `client_ref`)."""
        return f"{operation_id}{SEPARATOR}{self._mark(operation_id)}"

    def is_marked(self, reference: object, operation_id: str) -> bool:
        """Whether `reference` is exactly the one this session's harness gives `operation_id`."""
        if not isinstance(reference, str):
            return False
        return hmac.compare_digest(reference.encode(), self.reference(operation_id).encode())


def names_operation(reference: object, operation_id: str) -> bool:
    """Whether `reference` claims to be `operation_id`'s, marked or not: the operation id alone, or
    followed by the separator and anything."""
    return isinstance(reference, str) and (
        reference == operation_id or reference.startswith(operation_id + SEPARATOR)
    )


def derived_key(secret: bytes) -> bytes:
    """A key of its own for the marks, from another secret (the record key)."""
    return hmac.new(secret, _DOMAIN, hashlib.sha256).digest()


def key_in_file(path: Path) -> bytes:
    """The key kept in `path`, created there (32 random bytes, hex, mode 0600) when absent. The new
    file appears whole or not at all, so two processes starting at once read the same key."""
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    try:
        _create_key(path)
    except OSError as error:
        raise EffectKeyError(f"cannot create the effect key {path}: {error.strerror}") from None
    return _read_key(path)


def _create_key(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(MIN_KEY_BYTES) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):  # another process made it first: its key is the one
            os.link(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _read_key(path: Path) -> bytes:
    try:
        key = path.read_bytes().strip()
    except FileNotFoundError:
        raise
    except OSError as error:
        raise EffectKeyError(f"cannot read the effect key {path}: {error.strerror}") from None
    if len(key) < MIN_KEY_BYTES:
        raise EffectKeyError(
            f"the effect key {path} holds {len(key)} bytes, fewer than {MIN_KEY_BYTES}: remove it and "
            "the next run makes a new one (operations left open before then are shown for you to reconcile)"
        )
    return key
