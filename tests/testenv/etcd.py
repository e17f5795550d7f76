"""etcd on loopback: a single member for the event-store tests and the control plane, and a
three-member cluster for fault tests (stop a member, watch the leader move).

With `EtcdTls` a member serves its clients over TLS only and requires a client certificate
(`--client-cert-auth`); what a client needs is one directory laid out as a TLS Secret
(`belay.stores.etcd.credentials`), named in the store's URL as `?credentials=DIR`."""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from belay.journal.events import EventDraft, UserInput
from belay.stores.base import StoreUnavailable
from belay.stores.etcd.credentials import EtcdCredentials
from belay.stores.etcd.store import EtcdEventStore
from tests.testenv.binaries import component
from tests.testenv.certs import TinyCA
from tests.testenv.network import LOOPBACK, NOT_YET_ERRORS, free_port, healthy, http_post_json, wait_ready
from tests.testenv.polling import wait_until
from tests.testenv.processes import ManagedProcess

READY_TIMEOUT = 60.0


class EtcdTls:
    """A CA, one serving certificate for every member (loopback and `host`), and a client's
    certificate written as a TLS Secret's files (`client_dir`: ca.crt, tls.crt, tls.key)."""

    def __init__(
        self,
        directory: Path,
        host: str = LOOPBACK,
        client_cert_auth: bool = True,
        dns_names: tuple[str, ...] = ("localhost",),
    ) -> None:
        """`dns_names`: the names the serving certificate carries beside its addresses."""
        directory.mkdir(parents=True, exist_ok=True)
        self.client_cert_auth = client_cert_auth
        ca = TinyCA("belay-testenv-etcd-ca")
        # Client use too: etcd's JSON gateway (what `leader_name` asks) calls the member's own gRPC
        # server presenting this certificate, which --client-cert-auth checks as a client's.
        serving = ca.issue(
            "etcd",
            dns_names=dns_names,
            ips=tuple(dict.fromkeys((LOOPBACK, host))),
            server=True,
            client=True,
        )
        client = ca.issue("belay", client=True)
        self.ca_cert = _write(directory / "ca.crt", ca.cert_pem)
        self.server_cert = _write(directory / "server.crt", serving.cert_pem)
        self.server_key = _write(directory / "server.key", serving.key_pem)
        self.client_dir = directory / "client"
        self.client_dir.mkdir(exist_ok=True)
        _write(self.client_dir / "ca.crt", ca.cert_pem)
        self.client_cert = _write(self.client_dir / "tls.crt", client.cert_pem)
        self.client_key = _write(self.client_dir / "tls.key", client.key_pem)

    def server_flags(self) -> list[str]:
        serving = [f"--cert-file={self.server_cert}", f"--key-file={self.server_key}"]
        if not self.client_cert_auth:
            return serving
        return [*serving, f"--trusted-ca-file={self.ca_cert}", "--client-cert-auth"]

    def etcdctl_flags(self) -> list[str]:
        return [f"--cacert={self.ca_cert}", f"--cert={self.client_cert}", f"--key={self.client_key}"]

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context


async def refuses_a_write(endpoints: list[str], credentials: EtcdCredentials | None) -> bool:
    """Whether the etcd at `endpoints` (`http://` or `https://` URLs) refuses a client presenting
    `credentials` (None: plaintext) the write of an event."""
    store = EtcdEventStore(
        endpoints, prefix="/belay", record_key=b"", operation_timeout=5, credentials=credentials
    )
    try:
        await store.append("refused", [EventDraft(payload=UserInput(goal="let me in"))])
    except StoreUnavailable:
        return True
    finally:
        await store.close()
    return False


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


@dataclass
class EtcdMember:
    name: str
    data_dir: Path
    client_port: int = field(default_factory=free_port)
    peer_port: int = field(default_factory=free_port)
    process: ManagedProcess | None = None
    # Where clients reach it: loopback, or the node's bridge address for pods (tests/testenv/node.py).
    client_host: str = LOOPBACK
    tls: EtcdTls | None = None

    @property
    def client_url(self) -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{self.client_host}:{self.client_port}"

    @property
    def client_context(self) -> ssl.SSLContext | None:
        return self.tls.client_context() if self.tls is not None else None

    @property
    def peer_url(self) -> str:
        return f"http://{LOOPBACK}:{self.peer_port}"

    def argv(self, initial_cluster: str) -> list[str]:
        return [
            str(component("etcd").path("etcd")),
            f"--name={self.name}",
            f"--data-dir={self.data_dir}",
            f"--listen-client-urls={self.client_url}",
            f"--advertise-client-urls={self.client_url}",
            f"--listen-peer-urls={self.peer_url}",
            f"--initial-advertise-peer-urls={self.peer_url}",
            f"--initial-cluster={initial_cluster}",
            "--initial-cluster-state=new",
            "--initial-cluster-token=belay-testenv",
            "--log-level=warn",
            # Tests kill processes, never the machine: the page cache survives a killed etcd, so
            # skipping fsync loses nothing here and keeps a shared 2-core machine responsive.
            "--unsafe-no-fsync",
            *(self.tls.server_flags() if self.tls is not None else []),
        ]

    def is_healthy(self) -> bool:
        return healthy(f"{self.client_url}/health", self.client_context, expect=b'"health":"true"')


def _start(members: list[EtcdMember], run_dir: Path, detached: bool) -> None:
    initial_cluster = ",".join(f"{m.name}={m.peer_url}" for m in members)
    for member in members:
        if member.process is None:
            member.process = ManagedProcess(
                f"etcd {member.name}",
                member.argv(initial_cluster),
                run_dir / f"{member.name}.log",
                detached=detached,
            )
        member.process.start()


def _wait_ready(member: EtcdMember) -> None:
    process = member.process
    assert process is not None
    wait_ready(
        member.is_healthy,
        f"etcd member {member.name} at {member.client_url}",
        READY_TIMEOUT,
        still_starting=process.running,
        describe_failure=process.log_tail,
    )


class EtcdServer:
    """One etcd member. `endpoint` is its client URL."""

    def __init__(
        self,
        run_dir: Path,
        name: str = "etcd",
        detached: bool = False,
        host: str = LOOPBACK,
        tls: bool = False,
        client_cert_auth: bool = True,
        dns_names: tuple[str, ...] = ("localhost",),
    ) -> None:
        """`tls`: serve TLS only, requiring a client certificate unless `client_cert_auth` is False
        (then a client proves who it is by an etcd user's password, or not at all), with a
        certificate for its addresses and `dns_names`."""
        self.run_dir = run_dir
        self.tls = EtcdTls(run_dir / "tls", host, client_cert_auth, dns_names) if tls else None
        self.member = EtcdMember(name, run_dir / f"{name}.data", client_host=host, tls=self.tls)
        self.detached = detached

    def etcdctl(self, *args: str, user: str | None = None) -> str:
        """etcdctl against this member (`user`: "name:password" once authentication is on)."""
        argv = [str(component("etcd").path("etcdctl")), f"--endpoints={self.endpoint}", "--dial-timeout=5s"]
        if self.tls is not None:
            argv += self.tls.etcdctl_flags()
        if user is not None:
            argv.append(f"--user={user}")
        done = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    @property
    def endpoint(self) -> str:
        return self.member.client_url

    @property
    def process(self) -> ManagedProcess:
        assert self.member.process is not None, "not started"
        return self.member.process

    def start(self) -> None:
        _start([self.member], self.run_dir, self.detached)
        _wait_ready(self.member)

    def stop(self) -> None:
        if self.member.process is not None:
            self.member.process.stop()


class EtcdCluster:
    """Three members (by default) on loopback, each with its own data directory, so a stopped
    member restarts with its state and rejoins. `host`: where clients reach them (the node's bridge
    address for pods on the real node); the members talk to each other on loopback."""

    def __init__(self, run_dir: Path, size: int = 3, host: str = LOOPBACK, tls: bool = False) -> None:
        self.run_dir = run_dir
        self.tls = EtcdTls(run_dir / "tls", host) if tls else None
        self.members = {
            f"member{i}": EtcdMember(
                f"member{i}", run_dir / f"member{i}.data", client_host=host, tls=self.tls
            )
            for i in range(size)
        }

    @property
    def member_names(self) -> list[str]:
        return list(self.members)

    @property
    def endpoints(self) -> list[str]:
        return [m.client_url for m in self.members.values()]

    def endpoint_of(self, name: str) -> str:
        return self.members[name].client_url

    @property
    def credentials(self) -> EtcdCredentials | None:
        """What a client of the store needs (None without TLS)."""
        return EtcdCredentials.from_directory(self.tls.client_dir) if self.tls is not None else None

    def events_url(self, prefix: str) -> str:
        """The event store URL naming every member (belay.stores.etcd), and the client's
        credentials when the members serve TLS."""
        members = ",".join(m.client_url.split("://", 1)[1] for m in self.members.values())
        query = f"?credentials={self.tls.client_dir}" if self.tls is not None else ""
        return f"etcd://{members}{prefix}{query}"

    def start(self) -> None:
        # All members start together: each waits for a quorum of peers before it reports healthy.
        _start(list(self.members.values()), self.run_dir, detached=False)
        for member in self.members.values():
            _wait_ready(member)

    def stop(self) -> None:
        for member in self.members.values():
            if member.process is not None:
                member.process.stop()

    def running_members(self) -> list[str]:
        return [n for n, m in self.members.items() if m.process is not None and m.process.running()]

    def stop_member(self, name: str) -> None:
        """A clean shutdown (SIGTERM); use kill_member for a crash."""
        process = self.members[name].process
        assert process is not None, "cluster not started"
        process.stop()

    def kill_member(self, name: str) -> None:
        process = self.members[name].process
        assert process is not None, "cluster not started"
        process.kill()

    def start_member(self, name: str) -> None:
        """Restarts a stopped member with its data; returns once it is healthy (it has a leader)."""
        member = self.members[name]
        assert member.process is not None, "cluster not started"
        member.process.start()
        _wait_ready(member)

    def leader_name(self) -> str:
        """The current leader as seen by a running member, through etcd's JSON gateway. A stopped
        member that its peers still name as leader (before they notice) does not count."""
        running = self.running_members()
        for name in running:
            url, context = self.members[name].client_url, self.members[name].client_context
            try:
                status = http_post_json(f"{url}/v3/maintenance/status", {}, context=context)
                members = http_post_json(f"{url}/v3/cluster/member/list", {}, context=context)["members"]
            except OSError:
                continue
            leader_id = status.get("leader")
            for member in members:
                if leader_id is not None and member.get("ID") == leader_id and member["name"] in running:
                    return str(member["name"])
        raise RuntimeError("no running member reports a leader")

    def wait_for_leader(self, timeout: float = 30.0) -> str:
        return wait_until(
            self.leader_name,
            "etcd cluster leader election",
            timeout=timeout,
            interval=0.1,
            ignoring=(RuntimeError, *NOT_YET_ERRORS),  # RuntimeError: no running member reports a leader
        )
