"""One reconcile pass for one AgentSession: read the cluster and the record, call the pure
functions, write what they return. The kopf handlers call `SessionReconciler.reconcile`; nothing
here decides anything that a pure function in this package could decide instead.

The reconciler keeps the folded state of each session in memory and reads only the events after
its last seq on each pass; a restarted operator folds the whole log once and carries on (every
record write is idempotent and every object write is a server-side apply).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from belay.api.agentsession import AgentSessionSpec
from belay.api.status import (
    AgentSessionStatus,
    EventsExport,
    HarnessPodStatus,
    OperatorReason,
    SandboxPodStatus,
)
from belay.controller import admission, names, namespace_needs
from belay.controller.artifact_inputs import artifact_pins
from belay.controller.checkpoints import checkpoint_object
from belay.controller.children import (
    child_ended_write,
    child_manifest,
    child_wait_write,
    parent_link_write,
    reopen_in_parent_write,
)
from belay.controller.desired import SessionRef, apply_stages, desired_children, sandbox_token_secret
from belay.controller.drill import (
    DrillRequest,
    drill_manifest,
    drill_name,
    drill_request,
    drill_status,
    fault_point,
)
from belay.controller.kube import KubeClient
from belay.controller.memory import PassResult, SessionMemory
from belay.controller.observed import (
    claimed_pods,
    harness_pods,
    operator_liveness,
    pod_phase,
    replacements_of,
    sandbox_pods,
)
from belay.controller.ownership import (
    adoption_write,
    belongs_to,
    move_legacy_record,
    owner_after,
    record_of,
    record_of_body,
    refusal,
)
from belay.controller.pool import current_sandboxes, subagents_to_claim
from belay.controller.pooling import SandboxPool
from belay.controller.record import (
    ForkSourceMissing,
    RecordWrite,
    executor_change_write,
    fork_write,
    gave_up_write,
    harness_lost_write,
    rejections_not_applied,
    request_editor,
    request_write,
    sandbox_lost_write,
    scope_change_write,
    spec_approval_writes,
    spec_decision_writes,
    spec_rejection_writes,
)
from belay.controller.recovery import (
    BACKING_OFF,
    Action,
    HarnessDecision,
    decide_harness,
    failure_backoff,
    input_corrected,
    pending_cause,
    sandbox_losses,
    stalled_by_repeats,
)
from belay.controller.session_stores import SessionStores
from belay.controller.settings import OperatorSettings
from belay.controller.status import OperatorProblem, TransitionEvent, session_status_patch, transition_events
from belay.journal.events import CheckpointEvent, event_line
from belay.journal.phase import ENDED_PHASES, Liveness, phase_of
from belay.journal.state import EMPTY, SessionState, apply, fold
from belay.stores.base import (
    ArtifactStore,
    ClaimTaken,
    EventStore,
    RecordCorrupt,
    RecordKeyMismatch,
    StoreUnavailable,
)
from belay.stores.etcd import archive_closed

log = logging.getLogger("belay.operator")

T = TypeVar("T")
EventPoster = Callable[[dict[str, Any], TransitionEvent], None]
# Children are applied again at least this often even when nothing changed, so an object someone
# deleted by hand comes back.
REAPPLY_INTERVAL_S = 60.0


def shown(state: SessionState, name: str) -> SessionState:
    """The folded record as the status shows it: under the session's name, which the commands it
    names take (`kubectl belay approve NAME ...` in the session's namespace), not its record's id."""
    return state.model_copy(update={"session_id": name})


def _digest(objects: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(objects, sort_keys=True).encode()).hexdigest()


class SessionReconciler:
    def __init__(
        self,
        kube: KubeClient,
        settings: OperatorSettings,
        post_event: EventPoster | None = None,
        pool: SandboxPool | None = None,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.post_event = post_event
        self.pool = pool
        self.memory: dict[str, SessionMemory] = {}
        self.stores = SessionStores(kube, settings)
        self._locks: dict[str, asyncio.Lock] = {}

    # ---- stores

    def event_store(self, spec: AgentSessionSpec, namespace: str = "") -> EventStore:
        return self.stores.event_store(spec, namespace)

    async def open_stores(self, namespace: str, spec: AgentSessionSpec) -> tuple[EventStore, ArtifactStore]:
        return await self.stores.open(namespace, spec)

    async def close(self) -> None:
        await self.stores.close()
        self.kube.close()

    def lock(self, uid: str) -> asyncio.Lock:
        """Held through each pass of one session; the finalizer takes it too."""
        return self._locks.setdefault(uid, asyncio.Lock())

    def forget(self, uid: str) -> None:
        self.memory.pop(uid, None)
        self._locks.pop(uid, None)

    def children_changed(self, uid: str) -> None:
        """Something else changed or deleted one of the session's objects: its next pass applies
        them all again, instead of at the periodic apply."""
        memory = self.memory.get(uid)
        if memory is not None:
            memory.applied_digest = ""

    # ---- the pass

    async def record_moved(self, body: dict[str, Any]) -> bool:
        """Whether the session needs a pass for its record: the record has events this reconciler
        has not folded yet, or its store answers again after it did not (the status still says
        so). The cheap check a worker makes when nothing in the cluster changed. A store that does
        not answer is reported in the status, as a pass would, and raised."""
        uid = body["metadata"]["uid"]
        memory = self.memory.get(uid)
        if memory is None:
            return True
        spec = AgentSessionSpec.model_validate(body["spec"])
        if admission.refusals(spec, self.settings):
            return False  # refused: nothing of it runs, its record is not read
        try:
            store, _ = await self.open_stores(body["metadata"]["namespace"], spec)
            last_seq = await store.last_seq(record_of_body(body))
        except StoreUnavailable as error:
            async with self.lock(uid):
                await self._store_unavailable(body, memory, error)
            raise
        return last_seq > memory.state.last_seq or memory.store_unavailable

    async def _store_unavailable(self, body: dict[str, Any], memory: SessionMemory, error: Exception) -> None:
        memory.store_unavailable = True
        await self._report(
            body, memory, OperatorProblem(OperatorReason.STORE_UNAVAILABLE, str(error), stalls=False)
        )

    async def reconcile(self, body: dict[str, Any]) -> PassResult:
        """One pass. A store that cannot be reached is reported in the status (Reconciling, with
        reason StoreUnavailable) and raised, so the worker retries; a record that fails its
        integrity check likewise (Stalled, with reason RecordCorrupt, until a person restores it)."""
        uid = body["metadata"]["uid"]
        lock = self._locks.setdefault(uid, asyncio.Lock())
        async with lock:
            memory = self.memory.setdefault(uid, SessionMemory())
            try:
                passed = await self._reconcile(body, memory)
            except StoreUnavailable as error:
                await self._store_unavailable(body, memory, error)
                raise
            except (RecordCorrupt, RecordKeyMismatch) as error:
                # Nothing is done on a record that cannot be trusted (a person has to restore it),
                # nor read under another key than it was written with (one has to set the key).
                reason = (
                    OperatorReason.RECORD_KEY_MISMATCH
                    if isinstance(error, RecordKeyMismatch)
                    else OperatorReason.RECORD_CORRUPT
                )
                await self._report(body, memory, OperatorProblem(reason, str(error)))
                raise
            memory.store_unavailable = False
            return passed

    async def _report(
        self, body: dict[str, Any], memory: SessionMemory, problem: OperatorProblem
    ) -> AgentSessionStatus:
        """The last known status, with the operator's problem on top."""
        meta = body["metadata"]
        known = AgentSessionStatus.model_validate(memory.status) if memory.status else None
        typed = session_status_patch(
            shown(memory.state, meta["name"]),
            previous_status=body.get("status") or memory.status,
            generation=int(meta.get("generation") or 1),
            now=datetime.now(UTC),
            harness=known.harness if known else None,
            sandboxes=known.sandboxes if known else None,
            forked_from=memory.forked_from,
            problem=problem,
        )
        status = typed.to_status()
        if status != memory.status:
            await self.kube.call(self.kube.apply_status, meta["namespace"], meta["name"], status)
            memory.status = status
        return typed

    async def _write(self, store: EventStore, session: str, write: RecordWrite) -> None:
        try:
            await store.append(
                session, list(write.drafts), idempotency_key=write.idempotency_key, claim=write.claim
            )
        except ClaimTaken as taken:
            # Someone decided first (a person, the harness's grant from the same spec): their
            # decision stands, and the next fold shows it.
            log.info(
                "session %s: %s was decided at seq %s; not recorded again", session, taken.claim, taken.seq
            )

    async def _children(
        self, store: EventStore, ref: SessionRef, body: dict[str, Any], memory: SessionMemory
    ) -> None:
        """Create the AgentSession of each child session the record started, and record each
        child's end (with its deliverables) once its own record shows it, and each end after."""
        for name, link in list(memory.state.children.items()):
            if link.phase:
                ended = child_wait_write(ref.uid, memory.state, name)
                if ended is not None:
                    await self._write(store, record_of(ref), ended)
            elif name not in memory.children_created:
                await self.kube.call(self.kube.create_session_if_absent, child_manifest(body, link))
                memory.children_created.add(name)
            # Read on once it ended too: a child a person amended or rejected ends again, and
            # its new end (its new bytes) is collected as the first was.
            known = memory.child_states.get(name, EMPTY)
            # A child of the same namespace: the record of no session elsewhere is ever read.
            fresh = await store.read(names.record_id(ref.namespace, name), from_seq=known.last_seq + 1)
            memory.child_states[name] = child = fold(fresh, known) if fresh else known
            ended = child_ended_write(ref.uid, memory.state, name, child)
            if ended is not None:
                await self._write(store, record_of(ref), ended)
        await self._follow(store, ref, memory)

    async def _reopen_in_parent(self, store: EventStore, ref: SessionRef, memory: SessionMemory) -> None:
        """A child session a person amended or rejected after its end: in its coordinator's
        record, the child reopened (`belay.controller.children.reopen_in_parent_write`)."""
        state = memory.state
        if state.parent is None or state.lifecycle.reopened_seq is None:
            return
        parent = names.record_id(ref.namespace, state.parent.session)
        known = memory.parent_state
        fresh = await store.read(parent, from_seq=known.last_seq + 1)
        memory.parent_state = fold(fresh, known) if fresh else known
        write = reopen_in_parent_write(ref.uid, memory.parent_state, ref.name, state)
        if write is not None:
            await self._write(store, parent, write)

    async def _drill(
        self, store: EventStore, body: dict[str, Any], request: DrillRequest, memory: SessionMemory
    ) -> None:
        """Start the drill's copy once, follow its record, and judge it once it ended."""
        name = drill_name(body["metadata"]["name"], request.nonce)
        if memory.drill is None or memory.drill.request != request.nonce:
            await self.kube.call(self.kube.create_session_if_absent, drill_manifest(body, request))
            memory.drill_state = EMPTY
            memory.drill = drill_status(request, name, EMPTY, None, memory.state)
        if memory.drill.passed is not None:
            return
        record = names.record_id(body["metadata"]["namespace"], name)
        fresh = await store.read(record, from_seq=memory.drill_state.last_seq + 1)
        if fresh:
            memory.drill_state = fold(fresh, memory.drill_state)
        ended = phase_of(memory.drill_state) in ENDED_PHASES
        events = await store.read(record) if ended else None
        memory.drill = drill_status(request, name, memory.drill_state, events, memory.state)

    async def _export_events(
        self, store: EventStore, artifacts: ArtifactStore, session: str, asked: str, memory: SessionMemory
    ) -> None:
        """Answer `kubectl belay events`: the events from the asked seq ("<seq>/<nonce>") as JSON
        lines in the artifact store, published in the status; the previous export is deleted."""
        first, _, _ = asked.partition("/")
        from_seq = int(first) if first.isdigit() and int(first) > 0 else 1
        events = await store.read(session, from_seq=from_seq)
        data = "".join(event_line(e) + "\n" for e in events).encode()
        blob = await asyncio.to_thread(artifacts.put, data, media_type="application/x-ndjson")
        previous = memory.events_export
        memory.events_export = (
            EventsExport(
                request=asked,
                from_seq=from_seq,
                last_seq=events[-1].seq if events else from_seq - 1,
                count=len(events),
                sha256=blob.sha256,
                size=blob.size,
                location="",
            ),
            blob,
        )
        if previous is not None and previous[1].sha256 != blob.sha256:
            await asyncio.to_thread(artifacts.delete, previous[1].sha256)

    async def _follow(self, store: EventStore, ref: SessionRef, memory: SessionMemory) -> None:
        """Fold the events after the last one seen, and mirror the checkpoints among them; nothing,
        when the record belongs to another session (`memory.foreign` then says so)."""
        fresh = await store.read(record_of(ref), from_seq=memory.state.last_seq + 1)
        owner = owner_after(fresh, memory.owner)
        memory.foreign = not belongs_to(owner, ref.uid, fresh[-1].seq if fresh else memory.state.last_seq)
        if memory.foreign:
            memory.foreign_owner = owner
            return
        memory.owner = owner
        state = memory.state
        for event in fresh:
            state = apply(state, event)
            if isinstance(event, CheckpointEvent):
                await self.kube.call(self.kube.apply, checkpoint_object(ref, event))
        memory.state = state
        if any(isinstance(event, CheckpointEvent) for event in fresh):
            await archive_closed(store, record_of(ref))  # bounded etcd: docs/stores.md, "Archived segments"

    async def _fork(
        self, store: EventStore, ref: SessionRef, spec: AgentSessionSpec, memory: SessionMemory
    ) -> None:
        fork = spec.fork_from
        if fork is None or memory.forked_from is not None:
            return
        # The source is a session of the same namespace: no other namespace's record is ever copied.
        source = await store.read(names.record_id(ref.namespace, fork.session))
        try:
            write, status = fork_write(ref.uid, source, fork.checkpoint, fork.session)
        except ForkSourceMissing as error:
            memory.fork_error = f"forkFrom {fork.session}: {error}"
            return
        if await store.last_seq(record_of(ref)) == 0:
            await self._write(store, record_of(ref), write)
        memory.forked_from = status
        memory.fork_error = ""

    async def _decide(
        self,
        store: EventStore,
        ref: SessionRef,
        spec: AgentSessionSpec,
        memory: SessionMemory,
        pods: list[Any],
    ) -> HarnessDecision:
        """What to do with the harness pod (none runs for a fork whose source is missing), with
        what the decision records folded in."""
        source_problem = memory.source_problem()
        if source_problem is not None:
            return HarnessDecision(Action.STOP, None, why=source_problem.message)
        liveness = await operator_liveness(store, record_of(ref))

        decision = decide_harness(
            memory.state,
            harness_pods(pods),
            liveness.lease,
            spec.recovery.max_attempts,
            liveness,
            self.settings.harness_start_deadline_s,
            input_corrected(memory.state, spec),
        )
        if decision.action == Action.KEEP and decision.index is not None:
            await self._record_lost_sandboxes(store, ref, spec, memory, pods, decision.index)
        if decision.action == Action.REPLACE and decision.lost_attempt is not None:
            lost = harness_lost_write(ref.uid, decision.lost_attempt, decision.lost_pod, decision.why)
            await self._write(store, record_of(ref), lost)
            # The loss is an end of its own: it may repeat the ones before it (a stall, or a backoff).
            await self._follow(store, ref, memory)
            decision = stalled_by_repeats(memory.state) or decision
        if decision.action == Action.REPLACE:
            decision = failure_backoff(
                memory.state,
                decision,
                self._repeat_seen_at(memory),
                liveness.now,
                self.settings.failure_backoff_s,
            )
            if decision.action == Action.BACK_OFF:
                log.info("session %s/%s: %s", ref.namespace, ref.name, decision.why)
        if decision.action == Action.REPLACE:
            # Fence first: from here on the lost attempt cannot append, even if it still runs.
            fenced = await store.acquire_lease(record_of(ref), holder=names.FIELD_MANAGER)
            decision = HarnessDecision(
                Action.REPLACE, fenced.number, decision.lost_attempt, decision.lost_pod, decision.why
            )
            log.info(
                "session %s/%s: %s; attempt index %s", ref.namespace, ref.name, decision.why, fenced.number
            )
        elif decision.action == Action.GIVE_UP:
            await self._write(
                store,
                record_of(ref),
                gave_up_write(ref.uid, memory.state.lifecycle.harness_lost, spec.recovery.max_attempts),
            )
        await self._follow(store, ref, memory)
        return decision

    @staticmethod
    def _repeat_seen_at(memory: SessionMemory) -> datetime:
        """When this operator first saw the record's latest repeated failure: a backoff counts from
        there (an operator that restarts counts again from its own first sight)."""
        repeated = memory.state.lifecycle.repeated_failure
        seq = repeated.seq if repeated is not None else 0
        if memory.repeat_seen is None or memory.repeat_seen[0] != seq:
            memory.repeat_seen = (seq, datetime.now(UTC))
        return memory.repeat_seen[1]

    async def _record_lost_sandboxes(
        self,
        store: EventStore,
        ref: SessionRef,
        spec: AgentSessionSpec,
        memory: SessionMemory,
        pods: list[Any],
        index: int,
    ) -> None:
        """A sandbox pod lost under the live harness: recorded, which counts it, so the desired set
        of this pass names its replacement (and moves the Service there); the harness waits for
        the replacement and restores it, in the same attempt."""
        observed = sandbox_pods(pods)
        replacements = replacements_of(memory.state, spec)
        claimed = claimed_pods(pods, index, replacements)
        expected = current_sandboxes(ref.name, index, replacements, claimed)
        for loss in sandbox_losses(expected, observed, memory.seen_sandboxes):
            number = replacements[loss.subagent] + 1
            await self._write(
                store, record_of(ref), sandbox_lost_write(ref.uid, loss.subagent, loss.pod, loss.why, number)
            )
            log.info(
                "session %s/%s: sandbox pod %s of %s lost (%s); starting replacement %s",
                ref.namespace,
                ref.name,
                loss.pod,
                loss.subagent,
                loss.why,
                number,
            )
        live = {name for name in expected.values() if name in observed and observed[name].live}
        memory.seen_sandboxes = (memory.seen_sandboxes & set(expected.values())) | live

    async def _claim(
        self,
        ref: SessionRef,
        spec: AgentSessionSpec,
        index: int | None,
        replacements: dict[str, int],
        pods: list[Any],
        memory: SessionMemory,
    ) -> dict[str, str]:
        """The pool pods of attempt `index`, by subagent: those claimed before, and those claimed
        now for the subagents that have no sandbox pod yet, while its harness pod is not made."""
        claimed = claimed_pods(pods, index, replacements)
        existing = (pod.metadata.name for pod in pods)
        wanted = subagents_to_claim(ref, spec, self.settings, index, replacements, existing, claimed)
        if self.pool is None or index is None or not wanted:
            return claimed
        if not memory.policies_applied:
            # A claimed pod is under the session's NetworkPolicies from its claim on: they come first.
            policies = [
                o for o in desired_children(ref, spec, self.settings, None) if o["kind"] == "NetworkPolicy"
            ]
            await asyncio.gather(*(self.kube.call(self.kube.apply, policy) for policy in policies))
            memory.policies_applied = True
        return {**claimed, **await self.pool.claim(ref, wanted, index)}

    async def _apply_children(
        self,
        ref: SessionRef,
        objects: list[dict[str, Any]],
        pods: list[Any],
        memory: SessionMemory,
        claimed: dict[str, str],
    ) -> None:
        now = asyncio.get_running_loop().time()
        digest = _digest(objects)
        wanted_pods = {o["metadata"]["name"] for o in objects if o["kind"] == "Pod"}
        # A pod being deleted counts as existing: it is never applied again (a harness still
        # stopping keeps its name until it is gone, and the next attempt's pods have other names).
        existing_pods = {p.metadata.name for p in pods}
        missing_pod = bool(wanted_pods - existing_pods)
        if digest != memory.applied_digest or missing_pod or now - memory.applied_at > REAPPLY_INTERVAL_S:
            for stage in apply_stages(objects):
                # A pod is immutable and its harness read the spec when it started; later spec
                # changes reach it through the record (scope changes, approvals), never by a rewrite.
                await asyncio.gather(
                    *(
                        self.kube.call(self.kube.apply, obj)
                        for obj in stage
                        if not (obj["kind"] == "Pod" and obj["metadata"]["name"] in existing_pods)
                    )
                )
            memory.applied_digest = digest
            memory.applied_at = now
            memory.policies_applied = True
        for pod in pods:
            if pod.metadata.name in claimed.values():
                continue  # a pool pod this attempt claimed: made already, never applied
            if pod.metadata.name not in wanted_pods and pod.metadata.deletion_timestamp is None:
                await self.kube.call(self.kube.delete_pod, ref.namespace, pod.metadata.name)

    def _pod_statuses(
        self,
        ref: SessionRef,
        spec: AgentSessionSpec,
        decision: HarnessDecision,
        pods: list[Any],
        lease: int,
        replacements: dict[str, int],
        claimed: dict[str, str],
    ) -> tuple[HarnessPodStatus | None, list[SandboxPodStatus]]:
        if decision.index is None:
            return None, []
        by_name = {p.metadata.name: p for p in pods}
        harness_name = names.harness_pod_name(ref.name, decision.index)
        harness_pod = by_name.get(harness_name)
        harness = HarnessPodStatus(
            pod=harness_name,
            attempt=decision.index,
            lease=lease,
            phase=pod_phase(harness_pod) if harness_pod is not None else "Pending",
        )
        sandboxes = []
        current = current_sandboxes(ref.name, decision.index, replacements, claimed)
        for sub in spec.subagents:
            name = current[sub.name]
            pod = by_name.get(name)
            sandboxes.append(
                SandboxPodStatus(
                    subagent=sub.name,
                    pod=name,
                    service=names.sandbox_service_name(ref.name, sub.name),
                    phase=pod_phase(pod) if pod is not None else "Pending",
                )
            )
        return harness, sandboxes

    async def _reconcile(self, body: dict[str, Any], memory: SessionMemory) -> PassResult:
        meta = body["metadata"]
        ref = SessionRef(meta["name"], meta["namespace"], meta["uid"], int(meta.get("generation") or 1))
        spec = AgentSessionSpec.model_validate(body["spec"])
        refused = admission.refusals(spec, self.settings)
        if refused:
            # Before anything of the session exists: no Secret, pod or policy, no record written.
            problem = OperatorProblem(OperatorReason.NOT_ALLOWED, "; ".join(refused))
            status = await self._report(body, memory, problem)
            return PassResult(HarnessDecision(Action.STOP, None, why=problem.message), status)
        store, artifacts = await self.open_stores(ref.namespace, spec)

        not_its_own = await self._own_record(store, ref, spec, memory)
        if not_its_own is not None:
            status = await self._report(body, memory, not_its_own)
            return PassResult(HarnessDecision(Action.STOP, None, why=not_its_own.message), status)
        await self._ensure_sandbox_tokens(ref, spec, memory)
        await self._fork(store, ref, spec, memory)
        await self._follow(store, ref, memory)
        pins, memory.input_error = await artifact_pins(self.kube, store, artifacts, ref, spec, memory.state)
        for pin in pins:
            await self._write(store, record_of(ref), pin)
        await self._record_request(store, ref, spec, memory)
        await self._record_parent_link(store, ref, meta, memory)
        await self._children(store, ref, body, memory)
        await self._record_spec_decisions(store, ref, spec, meta, memory)
        await self._follow(store, ref, memory)
        await self._reopen_in_parent(store, ref, memory)
        self._report_rejections_not_applied(body, spec, memory)

        pods = await self.kube.call(self.kube.session_pods, ref.namespace, ref.name)
        missing = await namespace_needs.lacking(
            self.kube, ref.namespace, spec, self.settings, memory.state, pods
        )
        lacking = None if missing is None else OperatorProblem(*missing)
        if lacking is not None:
            status = await self._report(body, memory, lacking)
            stop = HarnessDecision(Action.STOP, None, why=lacking.message)
            return PassResult(stop, status, next_pass_in_s=namespace_needs.RECHECK_S)
        decision = await self._decide(store, ref, spec, memory, pods)
        replacements = replacements_of(memory.state, spec)
        fault = fault_point(meta.get("annotations"), memory.state)
        claimed = await self._claim(ref, spec, decision.index, replacements, pods, memory)
        objects = desired_children(ref, spec, self.settings, decision.index, replacements, fault, claimed)
        await self._apply_children(ref, objects, pods, memory, claimed)
        await self._answer_requests(store, artifacts, body, memory)

        liveness = await operator_liveness(store, record_of(ref))
        harness, sandboxes = self._pod_statuses(
            ref, spec, decision, pods, liveness.lease, replacements, claimed
        )
        previous = body.get("status") or memory.status
        # A backoff, or the kept harness pod waiting on what does not pass on its own.
        pending = pending_cause(decision, harness_pods(pods), self.settings.harness_start_deadline_s)
        shown_problem = (
            OperatorProblem(BACKING_OFF, decision.why, stalls=False)
            if decision.action == Action.BACK_OFF
            else (OperatorProblem(*pending, stalls=False) if pending else None)
        )
        status = self._status_of(ref, memory, previous, harness, sandboxes, liveness, shown_problem)
        transitions = await self._publish_status(body, ref, memory, previous, status)
        follows_clock = decision.index is not None and liveness.renewed_current_lease
        # A backoff, or a Pending harness pod's start deadline: the next pass is due then.
        next_pass = decision.retry_in_s or None
        return PassResult(decision, status, transitions, follows_clock, next_pass)

    async def _own_record(
        self, store: EventStore, ref: SessionRef, spec: AgentSessionSpec, memory: SessionMemory
    ) -> OperatorProblem | None:
        """The record moved from its bare-name key once, then folded if it is the session's own,
        or adopted if the spec says so; otherwise the problem that stops the session, with nothing
        written (`belay.controller.ownership`)."""
        record = record_of(ref)
        if not memory.legacy_checked or (memory.legacy_left and spec.adopt_record):
            moved = await move_legacy_record(store, ref.name, record, ref.uid, spec.adopt_record)
            memory.legacy_checked, memory.legacy_left = True, not moved
        await self._follow(store, ref, memory)
        if not memory.foreign:
            return None
        if not spec.adopt_record:
            message = refusal(record, memory.foreign_owner, ref.uid)
            return OperatorProblem(OperatorReason.RECORD_BELONGS_TO_ANOTHER, message)
        await self._write(store, record, adoption_write(ref.uid, record, memory.foreign_owner))
        log.info("session %s/%s: adopted the record %s", ref.namespace, ref.name, record)
        await self._follow(store, ref, memory)
        return None

    async def _ensure_sandbox_tokens(
        self, ref: SessionRef, spec: AgentSessionSpec, memory: SessionMemory
    ) -> None:
        """Each subagent's sandbox token, in a Secret of its own, made once."""
        for sub in spec.subagents:
            if sub.name not in memory.tokens_created:
                token = sandbox_token_secret(ref, sub.name, secrets.token_urlsafe(32))
                await self.kube.call(self.kube.ensure_secret, token)
                memory.tokens_created |= {sub.name}

    async def _record_request(
        self, store: EventStore, ref: SessionRef, spec: AgentSessionSpec, memory: SessionMemory
    ) -> None:
        """The request goes in before the first harness pod exists (a fork's comes with its copy)."""
        if spec.fork_from is not None and memory.forked_from is None:
            return
        request = request_write(ref.uid, ref.generation, spec, memory.state)
        if request is not None:
            await self._write(store, record_of(ref), request)
            await self._follow(store, ref, memory)

    async def _record_parent_link(
        self, store: EventStore, ref: SessionRef, meta: dict[str, Any], memory: SessionMemory
    ) -> None:
        linked = parent_link_write(ref.uid, meta, memory.state)
        if linked is not None:
            await self._write(store, record_of(ref), linked)
            await self._follow(store, ref, memory)

    async def _record_spec_decisions(
        self,
        store: EventStore,
        ref: SessionRef,
        spec: AgentSessionSpec,
        meta: dict[str, Any],
        memory: SessionMemory,
    ) -> None:
        """What the spec decides that the record does not hold yet: its approvals, rejections and
        decisions, and an edit of its request (a scope change, by whoever edited it)."""
        writes = spec_approval_writes(ref.uid, spec, memory.state)
        writes += spec_rejection_writes(ref.uid, spec, memory.state)
        writes += spec_decision_writes(ref.uid, spec, memory.state)
        scope = scope_change_write(ref.uid, ref.generation, spec, memory.state, by=request_editor(meta))
        editor = request_editor(meta, "executor")
        move = executor_change_write(ref.uid, ref.generation, spec, memory.state, by=editor)
        for write in [*writes, *([scope] if scope else []), *([move] if move else [])]:
            await self._write(store, record_of(ref), write)

    def _report_rejections_not_applied(
        self, body: dict[str, Any], spec: AgentSessionSpec, memory: SessionMemory
    ) -> None:
        """A Warning event, once per entry, for each `spec.rejections` entry recorded as nothing."""
        for key, why in rejections_not_applied(spec, memory.state).items():
            if key not in memory.rejections_reported and self.post_event is not None:
                self.post_event(body, TransitionEvent("Warning", "RejectionNotApplied", why))
                memory.rejections_reported.add(key)

    async def _answer_requests(
        self, store: EventStore, artifacts: ArtifactStore, body: dict[str, Any], memory: SessionMemory
    ) -> None:
        """What the session's annotations ask for: a drill, an export of its events."""
        annotations = body["metadata"].get("annotations")
        drill = drill_request(annotations)
        if drill is not None:
            await self._drill(store, body, drill, memory)
        asked = (annotations or {}).get(names.ANNOTATION_EVENTS_REQUEST)
        if asked and (memory.events_export is None or memory.events_export[0].request != asked):
            await self._export_events(store, artifacts, record_of_body(body), asked, memory)

    def _status_of(
        self,
        ref: SessionRef,
        memory: SessionMemory,
        previous: dict[str, Any] | None,
        harness: HarnessPodStatus | None,
        sandboxes: list[SandboxPodStatus],
        liveness: Liveness,
        problem: OperatorProblem | None = None,
    ) -> AgentSessionStatus:
        """`problem`: what only this pass knows (a backoff), else a fork whose source is missing.
        Every blob is named by its address in the artifact store (`s3://bucket/key`), never by a
        presigned URL: whoever may read the status would hold it as a bearer token. `kubectl
        belay` reads the blob with its user's own access to the store."""
        return session_status_patch(
            shown(memory.state, ref.name),
            previous_status=previous,
            generation=ref.generation,
            now=datetime.now(UTC),
            harness=harness,
            sandboxes=sandboxes,
            forked_from=memory.forked_from,
            drill=memory.drill,
            events_export=memory.events_export[0].model_copy(
                update={"location": memory.events_export[1].uri or f"sha256:{memory.events_export[1].sha256}"}
            )
            if memory.events_export is not None
            else None,
            problem=problem or memory.source_problem(),
            liveness=liveness,
        )

    async def _publish_status(
        self,
        body: dict[str, Any],
        ref: SessionRef,
        memory: SessionMemory,
        previous: dict[str, Any] | None,
        status: AgentSessionStatus,
    ) -> list[TransitionEvent]:
        """The status written when it changed, with a Kubernetes event for each transition."""
        status_body = status.to_status()
        transitions: list[TransitionEvent] = []
        if status_body != memory.status:
            transitions = transition_events(memory.status or previous, status)
            await self.kube.call(self.kube.apply_status, ref.namespace, ref.name, status_body)
            memory.status = status_body
            if self.post_event is not None:
                for transition in transitions:
                    self.post_event(body, transition)
        return transitions
