"""etcd's own authentication: an etcd user's name and password, as the files `username` and
`password` of the store's credentials directory (beside `ca.crt`: a password goes only over TLS),
against a real member with authentication on. The store with the right password writes under the
prefix its role grants; a wrong password is refused in one line naming the store and the user,
never the password, with nothing written; a token etcd forgot (a restarted member forgets its
simple tokens) is replaced without the caller seeing it."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from belay.journal.events import EventDraft, UserInput
from belay.stores.base import StoreError
from belay.stores.etcd.authentication import AuthenticationRefused
from belay.stores.etcd.credentials import EtcdCredentials
from belay.stores.factory import open_event_store
from tests.testenv.availability import require_built
from tests.testenv.etcd import EtcdServer

pytestmark = pytest.mark.testenv
SESSION = "with-a-password"
USER = "belay"
PASSWORD = "pw-" + secrets.token_hex(8)
PREFIX = "/authenticated"
# Guards against a hang; never a timing assertion.
HANG_GUARD_SECONDS = 30


@pytest.fixture(scope="module")
def auth_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A member serving TLS (no client certificate asked) with etcd's authentication on: a root
    user, and the user `belay` whose role may read and write under PREFIX alone."""
    require_built("etcd")
    server = EtcdServer(tmp_path_factory.mktemp("etcd-auth"), tls=True, client_cert_auth=False)
    try:
        server.start()
        root_password = secrets.token_hex(8)
        server.etcdctl("user", "add", "root", f"--new-user-password={root_password}")
        server.etcdctl("role", "add", "root")
        server.etcdctl("user", "grant-role", "root", "root")
        server.etcdctl("user", "add", USER, f"--new-user-password={PASSWORD}")
        server.etcdctl("role", "add", "belay")
        server.etcdctl("role", "grant-permission", "belay", "--prefix=true", "readwrite", f"{PREFIX}/")
        server.etcdctl("user", "grant-role", USER, "belay")
        server.etcdctl("auth", "enable")
        yield server
    finally:
        server.stop()


def credentials(server: EtcdServer, directory: Path, password: str | None) -> Path:
    """A credentials directory as a mounted Secret would hold it: the CA, and the user's name
    and password (with the newline `echo` leaves) unless `password` is None."""
    assert server.tls is not None
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ca.crt").write_bytes(server.tls.ca_cert.read_bytes())
    if password is not None:
        (directory / "username").write_text(USER + "\n")
        (directory / "password").write_text(password + "\n")
    return directory


def url(server: EtcdServer, directory: Path, prefix: str) -> str:
    return f"etcd://{server.endpoint.split('://', 1)[1]}{prefix}?credentials={directory}"


def goal(text: str) -> list[EventDraft]:
    return [EventDraft(payload=UserInput(goal=text))]


async def test_the_store_with_the_users_password_writes_and_reads(
    auth_etcd: EtcdServer, tmp_path: Path
) -> None:
    store = open_event_store(url(auth_etcd, credentials(auth_etcd, tmp_path, PASSWORD), f"{PREFIX}/ok"))
    try:
        stored = await store.append(SESSION, goal("with the password"))
        assert [e.seq for e in await store.read(SESSION)] == [e.seq for e in stored] == [1]
    finally:
        await store.close()


async def test_watches_carry_the_users_token(auth_etcd: EtcdServer, tmp_path: Path) -> None:
    """A watch is a stream, not a call: it carries the token too, or etcd cancels it (permission
    denied) and the follower would wait for ever."""
    directory = credentials(auth_etcd, tmp_path, PASSWORD)
    follower = open_event_store(url(auth_etcd, directory, f"{PREFIX}/watched"))
    writer = open_event_store(url(auth_etcd, directory, f"{PREFIX}/watched"))
    sessions = follower.watch_sessions()
    events = follower.watch(SESSION)
    try:
        assert await asyncio.wait_for(anext(sessions), HANG_GUARD_SECONDS) is None
        await writer.append(SESSION, goal("watched"))
        assert await asyncio.wait_for(anext(sessions), HANG_GUARD_SECONDS) == SESSION
        followed = await asyncio.wait_for(anext(events), HANG_GUARD_SECONDS)
        assert followed.seq == 1
    finally:
        await sessions.aclose()  # type: ignore[attr-defined]
        await events.aclose()  # type: ignore[attr-defined]
        await follower.close()
        await writer.close()


async def test_a_wrong_password_is_refused_in_one_line_naming_the_store_not_the_password(
    auth_etcd: EtcdServer, tmp_path: Path
) -> None:
    wrong = "wrong-" + secrets.token_hex(8)
    prefix = f"{PREFIX}/wrong"
    store = open_event_store(url(auth_etcd, credentials(auth_etcd, tmp_path / "wrong", wrong), prefix))
    try:
        with pytest.raises(AuthenticationRefused) as refused:
            await store.append(SESSION, goal("let me in"))
    finally:
        await store.close()
    message = str(refused.value)
    assert "\n" not in message
    assert auth_etcd.endpoint.split("://", 1)[1] in message and repr(USER) in message
    assert wrong not in message and PASSWORD not in message

    right = open_event_store(url(auth_etcd, credentials(auth_etcd, tmp_path / "right", PASSWORD), prefix))
    try:
        assert await right.read(SESSION) == []
    finally:
        await right.close()


async def test_without_the_password_the_store_is_refused(auth_etcd: EtcdServer, tmp_path: Path) -> None:
    """The control: authentication is on, so what the tests above measure is the password."""
    store = open_event_store(url(auth_etcd, credentials(auth_etcd, tmp_path, None), f"{PREFIX}/none"))
    try:
        with pytest.raises(StoreError, match="etcd refused the request"):
            await store.append(SESSION, goal("no password"))
    finally:
        await store.close()


async def test_a_token_the_restarted_member_forgot_is_replaced(auth_etcd: EtcdServer, tmp_path: Path) -> None:
    store = open_event_store(url(auth_etcd, credentials(auth_etcd, tmp_path, PASSWORD), f"{PREFIX}/restart"))
    try:
        await store.append(SESSION, goal("before the restart"))
        auth_etcd.stop()
        auth_etcd.start()
        after = await store.append(SESSION, goal("after the restart"))
        assert [e.seq for e in after] == [2]
    finally:
        await store.close()


def test_half_a_user_is_refused_and_the_password_is_kept_out_of_the_repr(
    auth_etcd: EtcdServer, tmp_path: Path
) -> None:
    directory = credentials(auth_etcd, tmp_path, PASSWORD)
    assert PASSWORD not in repr(EtcdCredentials.from_directory(directory))
    (directory / "password").unlink()
    with pytest.raises(ValueError, match="password is missing"):
        EtcdCredentials.from_directory(directory)
