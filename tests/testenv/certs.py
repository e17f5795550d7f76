"""The PKI a control plane needs, made at start the way controller-runtime's envtest does it: a
throwaway CA, a serving certificate for loopback, an admin client certificate in system:masters,
a service-account signing key pair, and a self-contained admin kubeconfig.

ECDSA P-256 keys: a fraction of a millisecond each, where RSA 2048 costs tens of milliseconds."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=7)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes


class TinyCA:
    """A certificate authority that lives as long as one environment."""

    def __init__(self, common_name: str = "belay-testenv-ca") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self._name = _name(common_name)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.cert_pem = _cert_pem(self.cert)
        self.key_pem = _key_pem(self._key)

    def issue(
        self,
        common_name: str,
        organization: str | None = None,
        dns_names: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        server: bool = False,
        client: bool = False,
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        alt_names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(_cert_pem(cert), _key_pem(key))


@dataclass(frozen=True)
class ControlPlanePKI:
    """Paths of everything written by `write_pki`."""

    dir: Path
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path
    service_account_pub: Path

    def client_ssl_context(self) -> ssl.SSLContext:
        """Trusts the CA and presents the admin certificate."""
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        context.load_cert_chain(str(self.admin_cert), str(self.admin_key))
        return context


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)
    return path


def write_pki(directory: Path, service_ip: str, address: str = "127.0.0.1") -> ControlPlanePKI:
    directory.mkdir(parents=True, exist_ok=True)
    ca = TinyCA()
    serving = ca.issue(
        "kube-apiserver",
        dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        ips=tuple(dict.fromkeys(("127.0.0.1", address, service_ip))),
        server=True,
    )
    admin = ca.issue("belay-testenv-admin", organization="system:masters", client=True)
    sa_key = ec.generate_private_key(ec.SECP256R1())
    sa_pub = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return ControlPlanePKI(
        dir=directory,
        ca_cert=_write(directory / "ca.crt", ca.cert_pem),
        ca_key=_write(directory / "ca.key", ca.key_pem, private=True),
        serving_cert=_write(directory / "apiserver.crt", serving.cert_pem),
        serving_key=_write(directory / "apiserver.key", serving.key_pem, private=True),
        admin_cert=_write(directory / "admin.crt", admin.cert_pem),
        admin_key=_write(directory / "admin.key", admin.key_pem, private=True),
        service_account_key=_write(directory / "sa.key", _key_pem(sa_key), private=True),
        service_account_pub=_write(directory / "sa.pub", sa_pub),
    )


def kubeconfig(server: str, pki: ControlPlanePKI, name: str = "belay-testenv") -> str:
    """An admin kubeconfig with the certificates embedded, so it works when copied elsewhere."""

    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": server, "certificate-authority-data": b64(pki.ca_cert)}}
        ],
        "users": [
            {
                "name": f"{name}-admin",
                "user": {
                    "client-certificate-data": b64(pki.admin_cert),
                    "client-key-data": b64(pki.admin_key),
                },
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin"}}],
        "current-context": name,
    }
    return yaml.safe_dump(config, sort_keys=False)
