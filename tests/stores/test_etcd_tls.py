"""The etcd store over TLS with client certificates (`?credentials=DIR` on its URL, a directory
laid out as a TLS Secret): a member that serves TLS and requires client certificates answers the
store that presents its credentials, and refuses a plaintext client, a client without a
certificate and a client that trusts another CA; nothing they try is written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from belay.journal.events import EventDraft, UserInput
from belay.stores.base import StoreUnavailable
from belay.stores.etcd import EtcdEventStore
from belay.stores.etcd.credentials import EtcdCredentials
from belay.stores.factory import open_event_store
from tests.testenv.availability import require_built
from tests.testenv.certs import TinyCA
from tests.testenv.etcd import EtcdCluster, EtcdServer

pytestmark = pytest.mark.testenv
SESSION = "over-tls"


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    require_built("etcd")
    server = EtcdServer(tmp_path_factory.mktemp("etcd-tls"), tls=True)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def address(server: EtcdServer) -> str:
    return server.endpoint.split("://", 1)[1]


def store(server: EtcdServer, prefix: str, credentials: EtcdCredentials | None) -> EtcdEventStore:
    return EtcdEventStore(
        [f"http://{address(server)}"],
        prefix=prefix,
        record_key=b"",
        request_timeout=0.5,
        operation_timeout=1.5,
        credentials=credentials,
    )


async def test_the_store_with_its_credentials_writes_and_reads(tls_etcd: EtcdServer) -> None:
    assert tls_etcd.tls is not None
    opened = open_event_store(f"etcd://{address(tls_etcd)}/tls-ok?credentials={tls_etcd.tls.client_dir}")
    try:
        stored = await opened.append(SESSION, [EventDraft(payload=UserInput(goal="over TLS"))])
        assert [e.seq for e in await opened.read(SESSION)] == [e.seq for e in stored] == [1]
    finally:
        await opened.close()


def strangers(tls_etcd: EtcdServer, tmp_path: Path) -> dict[str, EtcdCredentials | None]:
    assert tls_etcd.tls is not None
    own = EtcdCredentials.from_directory(tls_etcd.tls.client_dir)
    other_ca = TinyCA("another-ca")
    other_client = other_ca.issue("belay", client=True)
    return {
        "plaintext": None,
        "no client certificate": EtcdCredentials(ca=own.ca),
        "another CA": EtcdCredentials(
            ca=other_ca.cert_pem, cert=other_client.cert_pem, key=other_client.key_pem
        ),
        "a certificate another CA signed": EtcdCredentials(
            ca=own.ca, cert=other_client.cert_pem, key=other_client.key_pem
        ),
    }


@pytest.mark.parametrize(
    "who", ["plaintext", "no client certificate", "another CA", "a certificate another CA signed"]
)
async def test_a_client_without_the_credentials_is_refused_and_writes_nothing(
    tls_etcd: EtcdServer, tmp_path: Path, who: str
) -> None:
    prefix = f"/tls-refused-{who.replace(' ', '-')}"
    stranger = store(tls_etcd, prefix, strangers(tls_etcd, tmp_path)[who])
    try:
        with pytest.raises(StoreUnavailable):
            await stranger.append(SESSION, [EventDraft(payload=UserInput(goal="let me in"))])
    finally:
        await stranger.close()
    assert tls_etcd.tls is not None
    checker = store(tls_etcd, prefix, EtcdCredentials.from_directory(tls_etcd.tls.client_dir))
    try:
        assert await checker.read(SESSION) == []
    finally:
        await checker.close()


async def test_the_same_plaintext_client_is_answered_by_a_member_without_tls(etcd_endpoint: str) -> None:
    """The control: what the refusals above measure is the member's TLS, not a client that never
    reaches anything."""
    plaintext = EtcdEventStore([etcd_endpoint], prefix="/tls-control", record_key=b"", operation_timeout=5)
    try:
        await plaintext.append(SESSION, [EventDraft(payload=UserInput(goal="in clear"))])
        assert len(await plaintext.read(SESSION)) == 1
    finally:
        await plaintext.close()


def test_credentials_with_half_a_client_pair_are_refused(tmp_path: Path) -> None:
    ca = TinyCA()
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    (tmp_path / "tls.crt").write_bytes(ca.issue("belay", client=True).cert_pem)
    with pytest.raises(ValueError, match=r"tls\.key is missing"):
        EtcdCredentials.from_directory(tmp_path)
    with pytest.raises(ValueError, match=r"ca\.crt"):
        EtcdCredentials.from_directory(tmp_path / "nowhere")


async def test_the_three_member_cluster_answers_over_tls_only(etcd_cluster: EtcdCluster) -> None:
    """The fault tests' cluster serves TLS: a store naming all three members with the credentials
    writes (each member's certificate checked against its own endpoint), and the same store in
    plaintext is refused with nothing written."""
    credentials = etcd_cluster.credentials
    assert credentials is not None
    members = [f"http://{endpoint.split('://', 1)[1]}" for endpoint in etcd_cluster.endpoints]

    def cluster_store(credentials: EtcdCredentials | None) -> EtcdEventStore:
        return EtcdEventStore(
            members, prefix="/tls-cluster", record_key=b"", operation_timeout=3, credentials=credentials
        )

    plaintext = cluster_store(None)
    try:
        with pytest.raises(StoreUnavailable):
            await plaintext.append(SESSION, [EventDraft(payload=UserInput(goal="in clear"))])
    finally:
        await plaintext.close()
    over_tls = cluster_store(credentials)
    try:
        assert await over_tls.read(SESSION) == []
        stored = await over_tls.append(SESSION, [EventDraft(payload=UserInput(goal="over TLS"))])
        assert [e.seq for e in await over_tls.read(SESSION)] == [e.seq for e in stored] == [1]
    finally:
        await over_tls.close()


async def test_a_member_whose_certificate_does_not_name_its_endpoint_is_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The store checks the name its endpoint gives against the member's certificate: a member
    whose certificate carries its address and no name is answered at its address and refused at
    `localhost` (the same member, the same CA), with nothing written."""
    require_built("etcd")
    server = EtcdServer(tmp_path_factory.mktemp("etcd-tls-no-name"), tls=True, dns_names=())
    server.start()
    try:
        assert server.tls is not None
        credentials = EtcdCredentials.from_directory(server.tls.client_dir)
        port = address(server).rsplit(":", 1)[1]

        def store_at(host: str) -> EtcdEventStore:
            return EtcdEventStore(
                [f"https://{host}:{port}"],
                prefix="/tls-names",
                record_key=b"",
                request_timeout=0.5,
                operation_timeout=1.5,
                credentials=credentials,
            )

        by_name = store_at("localhost")
        try:
            # Whatever error gRPC reports last (where `localhost` is also ::1, on which nothing
            # listens, it is that address's refusal): without the name check the call would go
            # through at 127.0.0.1.
            with pytest.raises(StoreUnavailable):
                await by_name.append(SESSION, [EventDraft(payload=UserInput(goal="by a name it lacks"))])
        finally:
            await by_name.close()
        by_address = store_at("127.0.0.1")
        try:
            assert await by_address.read(SESSION) == []
            await by_address.append(SESSION, [EventDraft(payload=UserInput(goal="by its address"))])
        finally:
            await by_address.close()
    finally:
        server.stop()
