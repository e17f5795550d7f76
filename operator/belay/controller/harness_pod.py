"""`python -m belay.controller.harness_pod`: the process a harness pod runs.

It runs one harness attempt for the session named in its environment (written by the operator,
see `belay.controller.desired.harness_pod`): the spec, the store locations, the Service address of
each subagent's sandbox pod, and the directory holding each sandbox's own token. Its record is the
one of its namespace and name (`ClusterSession`). Sandboxes belong
to the operator, which starts a clean set for every attempt; this process only connects to them.
A sandbox the operator claimed from its pool for this attempt has no token yet: the attempt holds
its one-time claim key (a file per subagent) and hands it the subagent's token before anything
else (docs/operator.md#the-sandbox-pool).
It exits 0 when the session completed and 1 otherwise, so the pod's phase tells the operator
whether the attempt ended the session. Told to stop (SIGTERM, as the kubelet does when the pod is
deleted or evicted; SIGINT), it stops cleanly within `BELAY_STOP_DRAIN_S` (which the operator sets
below the pod's grace period, see belay.harness.stopping) and exits 128 + the signal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from belay.api.agentsession import AgentSession, SubagentSpec
from belay.controller import admission, desired, names
from belay.executors.factory import executor_factory_for
from belay.executors.self_hosted import initial_model_id
from belay.harness.attempt import HarnessResult
from belay.harness.declared import DeclaredInputs, with_recorded_pins
from belay.harness.effect_marks import derived_key
from belay.harness.git_input import GIT_CREDENTIALS_DIR
from belay.harness.loop import Harness
from belay.harness.stopping import StopRequest, drain_from_environment
from belay.harness.tickets import TicketServiceClient
from belay.journal.snapshots import load_state
from belay.sandbox.client import NotClaimable, SandboxClient, SandboxUnavailable, claim_sandbox
from belay.stores.base import RecordKeyMismatch
from belay.stores.factory import normalize_spec, open_artifact_store, open_event_store
from belay.stores.integrity import record_key_for
from belay.stores.key_guard import IN_A_CLUSTER, guard_record_key, in_own_secret

# An external ticket service, when the session's tools use one, and the credential it takes.
TICKETS_URL_ENV = "BELAY_TICKETS_URL"
TICKETS_TOKEN_ENV = "BELAY_TICKETS_TOKEN"
SANDBOX_WAIT_S = 120.0
# Between tries of a sandbox that does not answer yet: soon at first, then at this pace.
RETRY_FIRST_S = 0.05
RETRY_LONGEST_S = 0.5
# A lost sandbox pod is replaced by the operator once it notices: the harness waits this long.
REPLACEMENT_WAIT_S = 300.0

log = logging.getLogger("belay.harness_pod")


class PodSandbox:
    """A sandbox pod reached through its Service; stopping it is the operator's business."""

    def __init__(
        self, name: str, endpoint: str, token: str, pid: int, instance: str, network_isolated: bool
    ) -> None:
        self.name = name
        self.endpoint = endpoint
        self.pid = pid
        self.instance = instance
        self.network_isolated = network_isolated
        # Bound to this instance: behind the same Service, a replacement pod refuses its requests.
        self.client = SandboxClient(endpoint, token, instance=instance)

    async def stop(self) -> None:
        await self.client.close()


class PodSandboxProvider:
    def __init__(
        self,
        endpoints: Mapping[str, str],
        tokens: Mapping[str, str],
        wait_s: float = SANDBOX_WAIT_S,
        replacement_wait_s: float = REPLACEMENT_WAIT_S,
        claims: Mapping[str, str] | None = None,
    ) -> None:
        self.endpoints = dict(endpoints)
        self.tokens = dict(tokens)  # by subagent: each sandbox accepts its own token only
        # By subagent: the claim key of the pool pod the operator claimed for this attempt.
        self.claims = dict(claims or {})
        self.wait_s = wait_s
        self.replacement_wait_s = replacement_wait_s

    async def start(self, subagent: SubagentSpec, replacing: Any = None) -> PodSandbox:
        """Wait until the subagent's sandbox answers; the pod may still be starting. With
        `replacing` (a lost sandbox): until another instance answers, the operator's replacement."""
        endpoint = self.endpoints[subagent.name]
        token = self.tokens[subagent.name]
        wait_s = self.wait_s if replacing is None else self.replacement_wait_s
        deadline = asyncio.get_running_loop().time() + wait_s
        claim_key = self.claims.get(subagent.name) if replacing is None else None
        # A claimed pool pod answers as soon as its Service names it: tried again soon at first.
        delay = RETRY_FIRST_S
        while True:
            probe = SandboxClient(endpoint, token)
            try:
                if claim_key is not None:
                    await self._claim(endpoint, claim_key, token)
                    claim_key = None
                health = await probe.health()
                if replacing is not None and health.instance == replacing.instance:
                    raise SandboxUnavailable(f"instance {health.instance} still answers; it was lost")
                return PodSandbox(
                    subagent.name, endpoint, token, health.pid, health.instance, health.network_isolated
                )
            except Exception as error:  # the Service has no ready endpoint yet, or the server starts
                if asyncio.get_running_loop().time() > deadline:
                    raise TimeoutError(
                        f"sandbox {subagent.name} at {endpoint} did not answer: {error}"
                    ) from error
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_LONGEST_S)
            finally:
                await probe.close()

    @staticmethod
    async def _claim(endpoint: str, claim_key: str, token: str) -> None:
        """Give the claimed pool pod its subagent's token. A sandbox there with a token of its own
        is the operator's replacement of a claimed pod lost meanwhile: nothing to claim."""
        try:
            await claim_sandbox(endpoint, claim_key, token)
        except NotClaimable:
            log.info("the sandbox at %s has a token of its own; nothing to claim", endpoint)


def sandbox_claims(directory: str | None) -> dict[str, str]:
    """The claim key of each pool sandbox claimed for this attempt, by subagent; none without
    a directory."""
    if not directory:
        return {}
    files = [p for p in Path(directory).iterdir() if not p.name.startswith(".") and p.is_file()]
    return {path.name: path.read_text().strip() for path in files}


def sandbox_tokens(directory: Path, subagents: list[str]) -> dict[str, str]:
    """Each subagent's sandbox token, from the files the operator's Secrets project (one per
    subagent, named after it)."""
    return {name: (directory / name).read_text().strip() for name in subagents}


def effect_key(environment: Mapping[str, str]) -> bytes:
    """The key of the marks on external effects: derived from the record key, which no sandbox
    pod holds; without one, from the ticket service's credential, which none holds either."""
    secret = record_key_for(normalize_spec(environment[desired.ENV_EVENT_STORE]))
    if secret is None:
        secret = (environment.get(TICKETS_TOKEN_ENV) or "").encode()
    return derived_key(secret)


class ClusterSession(AgentSession):
    """An AgentSession as its harness pod runs it: its record is the one of its namespace and name
    (`belay.controller.names.record_id`), which no session of another namespace shares."""

    @property
    def session_id(self) -> str:
        return names.record_id(self.metadata.namespace or "", self.metadata.name)


def session_from_environment(environment: Mapping[str, str]) -> AgentSession:
    return ClusterSession.model_validate(
        {
            "metadata": {
                "name": environment[desired.ENV_SESSION],
                "namespace": environment[desired.ENV_NAMESPACE],
            },
            "spec": json.loads(environment[desired.ENV_SESSION_SPEC]),
        }
    )


async def run_attempt(environment: Mapping[str, str], stop: StopRequest | None = None) -> HarnessResult:
    session = session_from_environment(environment)
    endpoints: dict[str, str] = json.loads(environment[desired.ENV_SANDBOX_ENDPOINTS])
    tokens = sandbox_tokens(Path(environment[desired.ENV_SANDBOX_TOKEN_DIR]), list(endpoints))
    store = open_event_store(environment[desired.ENV_EVENT_STORE])
    artifacts = open_artifact_store(environment[desired.ENV_ARTIFACT_STORE])
    tickets_url = environment.get(TICKETS_URL_ENV)
    tickets_token = environment.get(TICKETS_TOKEN_ENV) or None
    pod_name = environment.get("HOSTNAME") or f"harness-{environment.get(desired.ENV_HARNESS_INDEX, '?')}"
    if stop is not None:
        stop.install(asyncio.get_running_loop(), (signal.SIGTERM, signal.SIGINT), hard_deadline=True)
    try:
        if admission.own_stores(session.spec):
            what_to_set = in_own_secret(f"{session.metadata.namespace}/{session.spec.stores.secret_ref}")
        else:
            what_to_set = IN_A_CLUSTER
        await guard_record_key(store, "the session's event store", what_to_set)
        if any(item.artifact is not None for sub in session.spec.subagents for item in sub.inputs):
            # The operator pinned each artifact input's bytes in the record before this pod was
            # made; the spec's own sha256 (or a source amended since) never decides what is read.
            recorded = await load_state(store, artifacts, session.session_id)
            session = with_recorded_pins(session, recorded.state.input_pins)
        harness = Harness(
            session=session,
            store=store,
            artifacts=artifacts,
            sandboxes=PodSandboxProvider(
                endpoints, tokens, claims=sandbox_claims(environment.get(desired.ENV_SANDBOX_CLAIM_DIR))
            ),
            executors=executor_factory_for(session),
            tickets=TicketServiceClient(tickets_url, tickets_token) if tickets_url else None,
            effect_key=effect_key(environment),
            inputs=DeclaredInputs(session, GIT_CREDENTIALS_DIR, artifacts),
            holder=names.harness_holder(pod_name),
            model_id=initial_model_id(session),
            runtime_image=environment.get("BELAY_RUNTIME_IMAGE", "harness-pod"),
            stop=stop,
        )
        result = await harness.run()
        log.info("attempt %s ended: completed=%s %s", result.attempt, result.completed, result.detail)
        return result
    finally:
        await store.close()


def main(environment: Mapping[str, Any] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    values = dict(environment or os.environ)
    stop = StopRequest(drain_s=drain_from_environment(values))
    try:
        result = asyncio.run(run_attempt(values, stop))
    except RecordKeyMismatch as refused:
        # Before anything of the record is read: one line, naming what to set, not a traceback.
        print(refused, file=sys.stderr)
        return 2
    stop.disarm()
    if result.stopped_by is not None:
        return stop.exit_status
    return 0 if result.completed else 1


if __name__ == "__main__":
    sys.exit(main())
