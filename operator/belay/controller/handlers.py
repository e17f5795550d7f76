"""kopf handlers: thin. Each reads what kopf hands it and calls the reconciler, which calls the pure
functions of this package and applies their result with one field manager.

Run: `kopf run -m belay.controller.handlers --all-namespaces` (the chart does), or
`python -m belay.controller` which adds the metrics and health endpoints.

One worker (a kopf daemon) per AgentSession runs the passes, so passes for one session never
overlap; a change of the session or of one of its pods wakes it, and so does its record moving on
(one watch per event store, `belay.controller.follow`). A worker that nothing wakes reads nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from typing import Any, cast

import kopf

from belay.api.agentsession import AgentSessionSpec
from belay.controller import admission, metrics, names
from belay.controller.drill import DRILL_OF_LABEL
from belay.controller.follow import (
    PodView,
    RecordWatches,
    Step,
    WorkerWake,
    changed_beyond_status,
    pod_view,
    wait_for_next_step,
    worker_step,
)
from belay.controller.kube import KubeClient, load_api_client
from belay.controller.pooling import SandboxPool
from belay.controller.reconciler import SessionReconciler
from belay.controller.retention import retain_or_delete
from belay.controller.settings import settings_from_environment
from belay.controller.status import TransitionEvent
from belay.stores.base import RecordCorrupt, StoreError, StoreUnavailable
from belay.views.fleet.model import PARENT_LABEL

GROUP, VERSION, PLURAL = "belay.dev", "v1alpha1", "agentsessions"
# The store's watch wakes a worker when its record moves; as a safety net while that watch is not
# in place (it failed and is being opened again), a worker also asks the store this often.
FOLLOW_INTERVAL_S = float(os.environ.get("BELAY_FOLLOW_INTERVAL_S", "300"))
# A full pass at least this often, even when nothing seems to change: it applies the children
# again (one deleted by hand comes back).
RESYNC_INTERVAL_S = float(os.environ.get("BELAY_RESYNC_INTERVAL_S", "3600"))
# ... and this often while a harness renews the lease: only a pass notices the renewals stop.
LIVE_RESYNC_INTERVAL_S = 60.0
# A failed pass is tried again after this long, or sooner when something wakes the worker.
RETRY_INTERVAL_S = 1.0
KUBECONFIG_ENV = "BELAY_KUBECONFIG"

log = logging.getLogger("belay.operator")


class Runtime:
    """What the handlers share: the reconciler, the latest body of each session, its wake-up, what
    was last seen of each of their pods."""

    reconciler: SessionReconciler | None = None
    pool: SandboxPool | None = None
    pool_keeper: asyncio.Task[None] | None = None
    bodies: dict[str, dict[str, Any]] = {}
    pods: dict[str, PodView] = {}
    wakes: dict[str, WorkerWake] = {}
    watches = RecordWatches()


def _key(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}"


def _wake(key: str) -> None:
    wake = Runtime.wakes.get(key)
    if wake is not None:
        wake.ask_pass()


def _follow_record(reconciler: SessionReconciler, body: dict[str, Any], key: str, wake: WorkerWake) -> None:
    """Have the watch of the session's event store wake this worker when its record moves."""
    try:
        spec = AgentSessionSpec.model_validate(body["spec"])
        store = reconciler.event_store(spec, body["metadata"]["namespace"])
    except (StoreUnavailable, ValueError):
        return  # the pass reports it, and is tried again
    meta = body["metadata"]
    Runtime.watches.follow(store, names.record_id(meta["namespace"], meta["name"]), key, wake)


def _post_event(body: dict[str, Any], transition: TransitionEvent) -> None:
    kopf.event(
        kopf.Body(cast(kopf.RawBody, body)),
        type=transition.type,
        reason=transition.reason,
        message=transition.message,
    )


def _wake_pool() -> None:
    if Runtime.pool is not None:
        Runtime.pool.wake.set()


# Progress and the last handled spec live in annotations: the status belongs to the session.
@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.persistence.finalizer = names.FINALIZER
    settings.posting.level = logging.WARNING
    kube = KubeClient(load_api_client(os.environ.get(KUBECONFIG_ENV)))
    operator_settings = settings_from_environment()
    # The pool's keeper runs whatever the size: with 0 it drains the pools an earlier run left.
    pool = Runtime.pool = SandboxPool(kube, operator_settings)
    Runtime.pool_keeper = asyncio.create_task(
        pool.run(lambda: pool.wanted(Runtime.bodies)), name="sandbox-pool"
    )
    Runtime.reconciler = SessionReconciler(kube, operator_settings, post_event=_post_event, pool=pool)


@kopf.on.cleanup()
async def close_stores(**_: Any) -> None:
    if Runtime.pool_keeper is not None:
        Runtime.pool_keeper.cancel()
    await Runtime.watches.close()
    if Runtime.reconciler is not None:
        await Runtime.reconciler.close()


# Every change of a session refreshes its body and wakes its worker, but for a new status alone
# (the worker's own write at the end of its pass).
@kopf.on.event(GROUP, VERSION, PLURAL)
def session_changed(body: kopf.Body, namespace: str | None, name: str, **_: Any) -> None:
    key = _key(namespace, name)
    previous = Runtime.bodies.get(key)
    Runtime.bodies[key] = dict(body)
    if changed_beyond_status(previous, body):
        _wake(key)
    if previous is None or (previous.get("status") or {}).get("phase") != (body.get("status") or {}).get(
        "phase"
    ):
        _wake_pool()  # a session came, or one ended: its templates' pools change
    labels = body.get("metadata", {}).get("labels") or {}
    for waiting in (labels.get(PARENT_LABEL), labels.get(DRILL_OF_LABEL)):
        if waiting:
            # A child moved on (its coordinator may wait on it), or a drill's copy (its session reports it).
            _wake(_key(namespace, waiting))


# A pod of a session appeared, went away, or changed what a pass reads of it (its phase, its
# deletion, the cause of a wait that does not pass on its own): its worker decides what that
# means. Other changes (the scheduler's other conditions, a container's state) wake nothing.
@kopf.on.event("v1", "pods", labels={names.LABEL_MANAGED_BY: names.MANAGED_BY})
def pod_changed(
    event: kopf.RawEvent, body: kopf.Body, labels: kopf.Labels, namespace: str | None, name: str, **_: Any
) -> None:
    pod = _key(namespace, name)
    if labels.get(names.LABEL_COMPONENT) == names.COMPONENT_POOL and Runtime.pool is not None:
        Runtime.pool.namespaces.add(namespace or "")
        if event.get("type") == "DELETED":
            Runtime.pods.pop(pod, None)
            _wake_pool()  # a pool pod went: the pool may need another
        elif (view := pod_view(body)) != Runtime.pods.get(pod):
            Runtime.pods[pod] = view
            _wake_pool()  # a pool pod came up or ended
        return
    session = labels.get(names.LABEL_SESSION)
    if not session:
        return
    seen = Runtime.pods.get(pod)
    if event.get("type") == "DELETED":
        Runtime.pods.pop(pod, None)
        _wake(_key(namespace, session))
        return
    view = pod_view(body)
    if view != seen:
        Runtime.pods[pod] = view
        _wake(_key(namespace, session))


# One of the NetworkPolicies this operator writes was deleted or changed by someone else: it is
# applied again at once (a sandbox is never left without its walls until a periodic pass). The
# operator's own applies change nothing that is already as it writes it, so they wake nothing.
@kopf.on.event(
    "networking.k8s.io", "v1", "networkpolicies", labels={names.LABEL_MANAGED_BY: names.MANAGED_BY}
)
def network_policy_changed(
    event: kopf.RawEvent, body: kopf.Body, labels: kopf.Labels, namespace: str | None, name: str, **_: Any
) -> None:
    if event.get("type") not in ("MODIFIED", "DELETED"):
        return
    if name == names.POOL_POLICY and Runtime.pool is not None:
        Runtime.pool.policies.discard(namespace or "")
        _wake_pool()
    session = labels.get(names.LABEL_SESSION)
    if session and Runtime.reconciler is not None:
        for owner in body.get("metadata", {}).get("ownerReferences") or []:
            Runtime.reconciler.children_changed(owner.get("uid", ""))
        _wake(_key(namespace, session))


# The worker of one session: a pass now, then one whenever the cluster wakes it, its record moved
# past what it folded (the store's watch says when to look), or the resync interval passed.
@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=5.0)
async def session_worker(
    body: kopf.Body, namespace: str | None, name: str, stopped: kopf.DaemonStopped, **_: Any
) -> None:
    key = _key(namespace, name)
    wake = Runtime.wakes.setdefault(key, WorkerWake())
    metrics.SESSIONS.inc()
    Runtime.bodies.setdefault(key, dict(body))
    reconciler = Runtime.reconciler
    assert reconciler is not None
    wake.ask_pass()
    stopping = asyncio.create_task(_wake_when_stopped(stopped, wake))
    try:
        await _work(key, body, stopped, wake, reconciler)
    finally:
        stopping.cancel()
        Runtime.watches.unfollow(key)
        metrics.SESSIONS.dec()
        metrics.forget_session(key)


async def _wake_when_stopped(stopped: kopf.DaemonStopped, wake: WorkerWake) -> None:
    """The worker sleeps until woken: the operator stopping wakes it too, so it ends promptly."""
    await stopped.wait()
    wake.ask_pass()


async def _work(
    key: str, body: kopf.Body, stopped: kopf.DaemonStopped, wake: WorkerWake, reconciler: SessionReconciler
) -> None:
    loop = asyncio.get_running_loop()
    last_pass = last_check = loop.time()
    resync_s = RESYNC_INTERVAL_S
    while not stopped:
        current = Runtime.bodies.get(key, dict(body))
        if current.get("metadata", {}).get("deletionTimestamp"):
            break
        _follow_record(reconciler, current, key, wake)
        pass_asked, check_asked = wake.take()
        # A watch in place announces every change of the record: no periodic check is needed.
        follow_s = math.inf if Runtime.watches.watching(key) else FOLLOW_INTERVAL_S
        now = loop.time()
        step = worker_step(
            pass_asked=pass_asked,
            check_asked=check_asked,
            since_pass=now - last_pass,
            since_check=now - last_check,
            resync_s=resync_s,
            follow_s=follow_s,
        )
        if step is Step.CHECK:
            last_check = now
            try:
                step = Step.PASS if await reconciler.record_moved(current) else Step.WAIT
            except StoreUnavailable as error:  # in the status; checked again on the next timer
                log.warning("reading the record of %s: %s", key, error)
                step = Step.WAIT
            except Exception:
                log.exception("reading the record of %s failed", key)
                step = Step.WAIT
        if step is Step.WAIT:
            now = loop.time()
            await wake.wait(
                wait_for_next_step(
                    since_pass=now - last_pass,
                    since_check=now - last_check,
                    resync_s=resync_s,
                    follow_s=follow_s,
                )
            )
            continue
        last_pass = last_check = loop.time()
        with metrics.RECONCILE_SECONDS.time():
            try:
                outcome = await reconciler.reconcile(current)
                metrics.RECONCILES.labels(result="ok").inc()
                metrics.observe_session(key, outcome.status)
                if outcome.decision.action == "replace":
                    metrics.HARNESS_REPLACEMENTS.inc()
                resync_s = LIVE_RESYNC_INTERVAL_S if outcome.follows_clock else RESYNC_INTERVAL_S
                if outcome.next_pass_in_s is not None:
                    resync_s = min(resync_s, outcome.next_pass_in_s)
            except Exception as error:
                metrics.RECONCILES.labels(result="error").inc()
                if isinstance(error, StoreUnavailable | RecordCorrupt):  # in the status; no traceback needed
                    log.warning("reconcile of %s: %s; retrying", key, error)
                else:
                    log.exception("reconcile of %s failed; retrying", key)
                await wake.wait(RETRY_INTERVAL_S)
                wake.ask_pass()  # a failed pass is retried whether or not anything changed


# Deleting a session: its pods go now; its artifacts, then its record, go if spec.retention says so.
@kopf.on.delete(GROUP, VERSION, PLURAL)
async def session_deleted(body: kopf.Body, namespace: str | None, name: str, uid: str, **_: Any) -> None:
    reconciler = Runtime.reconciler
    assert reconciler is not None
    assert namespace is not None  # AgentSessions are namespaced
    pods = await reconciler.kube.call(reconciler.kube.session_pods, namespace, name)
    for pod in pods:
        await reconciler.kube.call(reconciler.kube.delete_pod, namespace, pod.metadata.name)
    spec = AgentSessionSpec.model_validate(body["spec"])
    try:
        # Under the session's lock: no pass of its worker writes to the record meanwhile.
        async with reconciler.lock(uid):
            if admission.refusals(spec, reconciler.settings):
                notes = []  # refused: nothing of it was made, no record written
            else:
                events, artifacts = await reconciler.open_stores(namespace, spec)
                notes = await retain_or_delete(namespace, name, uid, spec, events, artifacts)
    except StoreError as error:  # the finalizer stays until the stores answer
        raise kopf.TemporaryError(f"retention of {namespace}/{name}: {error}", delay=10) from error
    for note in notes:
        kopf.event(body, type="Normal", reason=note.reason, message=note.message)
    reconciler.forget(uid)
    key = _key(namespace, name)
    Runtime.bodies.pop(key, None)
    if Runtime.pool is not None:
        Runtime.pool.forget(key)
        Runtime.pool.wake.set()
    Runtime.wakes.pop(key, None)
    Runtime.watches.unfollow(key)
