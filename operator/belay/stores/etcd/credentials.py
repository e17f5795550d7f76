"""How the etcd store proves who it is and checks whom it talks to: TLS with the cluster's CA and,
where the cluster asks for it, a client certificate (etcd's `--client-cert-auth`, whose common name
is then the etcd user).

The credentials come from one directory laid out as a Kubernetes TLS Secret mounted as a volume
(and as cert-manager writes one): `ca.crt`, the CA that signed the members' serving certificates;
`tls.crt` and `tls.key`, the client's certificate and key (both or neither). A store opened
without a directory speaks plaintext, which only a cluster that listens on `http://` answers: a
member serving TLS refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CA_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
# A certificate, a key or a CA bundle is a few KiB; a file far larger is not one.
MAX_FILE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class EtcdCredentials:
    """PEM bytes: the CA to trust, and the client's certificate chain and key (or None)."""

    ca: bytes
    cert: bytes | None = None
    key: bytes | None = None

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
        return cls(ca=ca, cert=cert, key=key)


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
