"""How the etcd store proves who it is and checks whom it talks to: TLS with the cluster's CA and,
where the cluster asks for them, a client certificate (etcd's `--client-cert-auth`, whose common
name is then the etcd user) or an etcd user name and password (etcd's own authentication).

The credentials come from one directory laid out as a Kubernetes TLS Secret mounted as a volume
(and as cert-manager writes one): `ca.crt`, the CA that signed the members' serving certificates;
`tls.crt` and `tls.key`, the client's certificate and key (both or neither); `username` and
`password`, an etcd user's (both or neither). A password goes only over TLS: `ca.crt` is required
whatever else the directory holds. A store opened without a directory speaks plaintext, which only
a cluster that listens on `http://` answers: a member serving TLS refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

CA_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
USERNAME_FILE = "username"
PASSWORD_FILE = "password"
# A certificate, a key or a CA bundle is a few KiB; a file far larger is not one.
MAX_FILE_BYTES = 1024 * 1024
MAX_TEXT_BYTES = 4096


@dataclass(frozen=True)
class EtcdCredentials:
    """PEM bytes: the CA to trust, and the client's certificate chain and key (or None); an etcd
    user's name and password (or None). Neither the key nor the password is in the repr."""

    ca: bytes
    cert: bytes | None = None
    key: bytes | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @classmethod
    def from_directory(cls, directory: str | Path) -> EtcdCredentials:
        """Read from a mounted Secret's directory; ValueError naming the file when one is missing
        or unreadable, or only one of the client's pair is there."""
        root = Path(directory)
        ca = _read(root, CA_FILE, required=True)
        assert ca is not None
        cert, key = _read(root, CERT_FILE), _read(root, KEY_FILE)
        if (cert is None) != (key is None):
            missing = CERT_FILE if cert is None else KEY_FILE
            raise ValueError(
                f"etcd credentials in {root}: {missing} is missing "
                f"(a client needs both of {CERT_FILE} and {KEY_FILE}, or neither)"
            )
        username, password = _read_text(root, USERNAME_FILE), _read_text(root, PASSWORD_FILE)
        if (username is None) != (password is None):
            missing = USERNAME_FILE if username is None else PASSWORD_FILE
            raise ValueError(
                f"etcd credentials in {root}: {missing} is missing "
                f"(an etcd user needs both of {USERNAME_FILE} and {PASSWORD_FILE}, or neither)"
            )
        return cls(ca=ca, cert=cert, key=key, username=username, password=password)


def _read_text(root: Path, name: str) -> str | None:
    """A Secret's text value: one line (a trailing newline, as `echo` leaves it, is dropped)."""
    path = root / name
    if not path.exists():
        return None
    try:
        with path.open("rb") as file:
            data = file.read(MAX_TEXT_BYTES + 1)
    except OSError as error:
        raise ValueError(f"etcd credentials: cannot read {path}: {error.strerror or error}") from None
    try:
        text = data.decode().removesuffix("\n")
    except UnicodeDecodeError:
        text = ""
    if not text or len(data) > MAX_TEXT_BYTES or "\n" in text or "\r" in text:
        # The value is not quoted: it may be the secret itself.
        raise ValueError(f"etcd credentials: {path} is not one line of UTF-8 text")
    return text


def _read(root: Path, name: str, required: bool = False) -> bytes | None:
    path = root / name
    if not path.exists() and not required:
        return None
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise ValueError(f"etcd credentials: cannot read {path}: {error.strerror or error}") from None
    if len(data) > MAX_FILE_BYTES or b"-----BEGIN " not in data:
        raise ValueError(f"etcd credentials: {path} is not a PEM file")
    return data
