"""`kubectl belay`: the person's view of sessions in a cluster, for someone who may read and patch
AgentSessions and nothing else (no store credentials, no pods, no Secrets; with `list` on
Checkpoints the brief and the report show them too).

    kubectl belay sessions [-A] [-l SELECTOR] [--json] [--watch]   the fleet view
    kubectl belay objective OBJECTIVE [-A] [--json] [--watch]      the sessions of one objective
    kubectl belay brief NAME [-n NAMESPACE]     where the session stands, from its status
    kubectl belay approve NAME ID               approve one pending operation (bound to its payload
                                                hash), or say yes to a wait
    kubectl belay reject NAME ID --reason TEXT  turn down a pending operation or a published
                                                deliverable, or say no to a wait
    kubectl belay answer NAME WAIT TEXT         answer a wait on the user
    kubectl belay reconcile NAME OPERATION --succeeded|--failed
    kubectl belay amend NAME [--goal TEXT] [--part KEY=VALUE] [--remove-part KEY] [-f MANIFEST]
                                                change the request: request version N+1
    kubectl belay artifacts NAME | artifacts get NAME FILE [-o PATH]
    kubectl belay events NAME [--json] [--from SEQ]
    kubectl belay report NAME... | -l SELECTOR [-o FILE]  the timeline as one HTML file

An approval or a rejection is written into the session's spec (`spec.approvals`,
`spec.rejections`), exactly as a GitOps change would: the operator records it in the session
record, and only for the hash the pending request or the published deliverable carries, so a
payload that changed since is neither approved nor rejected. A rejected step is redone with the
reason. An amendment edits `spec.request` under the field manager `kubectl-belay/<user>`, which
the operator records as who changed the request. The other decisions (a yes, a no or an answer to
a wait, the verdict on an unknown outcome) go into `spec.decisions`, which the operator records
under the same claims the local commands take. A deliverable is fetched through the short-lived
URL the operator publishes in the status (an S3 store's presigned URL), never with store
credentials; so are the events, which the operator exports when the annotation
`belay.dev/events-request` asks for them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import posixpath
import secrets
import shlex
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, cast

import typer
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from belay.cli import terminal
from belay.cli.main import progress_line
from belay.journal import commands
from belay.journal.events import event_from_json
from belay.journal.fleet import columns
from belay.journal.report import (
    WAIT_BAR_KIND,
    Bar,
    DeliverableEntry,
    Gap,
    Mark,
    Row,
    SessionReport,
    StepEntry,
    WaitEntry,
    WaitEntryKind,
    render_html,
)

GROUP, VERSION = "belay.dev", "v1alpha1"
CONFLICT_RETRIES = 5

app = typer.Typer(
    name="kubectl-belay",
    help="Brief and approve Belay agent sessions in a cluster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _printable(ctx: typer.Context) -> None:
    ctx.with_resource(terminal.printable_output())


Namespace = Annotated[
    str | None, typer.Option("--namespace", "-n", help="default: the kubeconfig's namespace")
]
Kubeconfig = Annotated[str | None, typer.Option("--kubeconfig", envvar="KUBECONFIG", help="kubeconfig file")]


class PluginError(Exception):
    pass


def _connect(kubeconfig: str | None) -> tuple[client.CustomObjectsApi, str, str]:
    """The API, the context's namespace, and its user (who an approval or a change is by)."""
    try:
        api_client = config.new_client_from_config(config_file=kubeconfig)
        _, context = config.list_kube_config_contexts(config_file=kubeconfig)
    except (config.ConfigException, FileNotFoundError) as error:
        raise PluginError(f"cannot load kubeconfig: {error}") from None
    details = (context or {}).get("context", {})
    namespace = details.get("namespace") or "default"
    return client.CustomObjectsApi(api_client), namespace, str(details.get("user") or "unknown")


def _get(api: client.CustomObjectsApi, namespace: str, plural: str, name: str) -> dict[str, Any]:
    try:
        return cast(dict[str, Any], api.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name))
    except ApiException as error:
        if error.status == 404:
            raise PluginError(f"no AgentSession {name!r} in namespace {namespace!r}") from None
        raise PluginError(f"cannot read {plural}/{name}: {error.status} {error.reason}") from None


def _conditions_line(status: dict[str, Any]) -> str:
    parts = []
    for condition in status.get("conditions", []):
        parts.append(f"{condition['type']}={condition['status']} ({condition.get('reason', '')})")
    return ", ".join(parts)


def _interruption_lines(status: dict[str, Any]) -> list[str]:
    """The attempt that stopped proving it is alive, as the operator's status tells it."""
    gone = status.get("interruption")
    if not gone:
        return []
    since = gone.get("since") or "an unknown time"
    lines = [f"{status.get('phase', 'Recovering')} since {since}: {gone['why']}"]
    lines.append(f"  it was doing: {gone['doing']}")
    for op in gone.get("operations", []):
        who = f" [{op['subagent']}]" if op.get("subagent") else ""
        lines.append(f"  operation {op['operationId']} ({op['tool']}{who}): {op['settled']}")
    if gone.get("operationsOmitted"):
        lines.append(f"  ... and {gone['operationsOmitted']} more operations")
    lines.append(f"  next: {gone['next']}")
    return lines


USED_BY_BUDGET = {"maxModelCalls": "modelCalls", "maxTokens": "tokens"}


def _resource_lines(
    session: dict[str, Any], status: dict[str, Any], checkpoints: list[dict[str, Any]]
) -> list[str]:
    """Each subagent's sandbox pod and network profile, the budgets used and left, and every
    subagent's last verified checkpoint."""
    lines = []
    profiles = {s["name"]: s.get("networkProfile", "none") for s in session["spec"].get("subagents", [])}
    subagents = {s["name"]: s for s in status.get("subagents", [])}
    pods = {s["subagent"]: s for s in status.get("sandboxes", [])}
    names = sorted(set(subagents) | set(pods) | set(profiles))
    if names:
        lines.append("subagents:")
    for sub in names:
        record = subagents.get(sub, {})
        pod = pods.get(sub)
        where = f", pod {pod['pod']} ({pod['phase']})" if pod else ", no sandbox pod"
        profile = f", profile {profiles[sub]}" if sub in profiles else ""
        lines.append(f"  {sub}: {record.get('done', 0)}/{record.get('tasks', 0)} tasks done{where}{profile}")
    counts = status.get("counts", {})
    for budget, limit in sorted((session["spec"].get("budgets") or {}).items()):
        if budget in USED_BY_BUDGET:
            used = int(counts.get(USED_BY_BUDGET[budget], 0))
            lines.append(f"budget {budget}: {used} used, {max(0, limit - used)} left of {limit}")
    last_verified: dict[str, dict[str, Any]] = {}
    for cp in sorted(checkpoints, key=lambda c: c["spec"]["seq"]):
        if cp["spec"]["verified"]:
            last_verified[cp["spec"].get("subagent") or "the session"] = cp["spec"]
    for sub, spec in sorted(last_verified.items()):
        after = f", next: {spec['nextStep']}" if spec.get("nextStep") else ""
        lines.append(f"last verified checkpoint of {sub}: {spec['checkpointId']} (seq {spec['seq']}{after})")
    return lines


def briefing(session: dict[str, Any], checkpoints: list[dict[str, Any]]) -> str:
    """The page a person reads: pure, from the AgentSession and its Checkpoints."""
    name = session["metadata"]["name"]
    status = session.get("status") or {}
    lines = [f"{name}: {status.get('phase', 'Pending')}"]
    lines += _interruption_lines(status)
    goal = session["spec"]["request"]["goal"].strip()
    lines.append(f"  goal: {goal}")
    if status.get("currentStep"):
        lines.append(f"  step: {status['currentStep']}")
    lines.append(
        f"  attempt {status.get('attempt', 0)}, lease {status.get('lease', 0)}, "
        f"harness lost {status.get('harnessLost', 0)} time(s), restores {status.get('restores', 0)}"
    )
    if status.get("waitingOn"):
        lines.append(f"  waiting on: {status['waitingOn']}")
    if status.get("conditions"):
        lines.append(f"  conditions: {_conditions_line(status)}")
    pending = status.get("pendingApprovals", [])
    if pending:
        lines.append("pending approvals:")
        for item in pending:
            lines.append(f"  {item['approvalId']}: {item['tool']} {item.get('summary', '')}".rstrip())
            lines.append(f"    payload sha256 {item['payloadSha256']}")
            if item.get("contentLocation"):
                lines.append(
                    f"    read what it sends out (sha256 {item['contentSha256']}): {item['contentLocation']}"
                )
            if item.get("payloadLocation"):
                lines.append(f"    read the operation as approved: {item['payloadLocation']}")
            lines.append(f"    kubectl belay approve {name} {item['approvalId']}")
            lines.append(f'    (or: kubectl belay reject {name} {item["approvalId"]} --reason "...")')
    for wait in status.get("waits", []):
        lines.append(f"waits: {wait['kind']} {wait['waitId']}: {wait['reason']}")
    deliverables = status.get("deliverables", [])
    if deliverables:
        lines.append("deliverables:")
        for item in deliverables:
            review = " (ready for review)" if item.get("readyForReview") else ""
            lines.append(f"  {item['name']}{review}: {item['size']} bytes, sha256 {item['sha256']}")
            lines.append(f"    {item['location']}")
            if item.get("readyForReview"):
                lines.append(
                    f'    to have it redone: kubectl belay reject {name} {item["name"]} --reason "..."'
                )
    lines += _resource_lines(session, status, checkpoints)
    if checkpoints:
        ordered = sorted(checkpoints, key=lambda c: c["spec"]["seq"], reverse=True)
        lines.append(f"checkpoints ({len(ordered)}, newest first):")
        for cp in ordered[:10]:
            spec = cp["spec"]
            verified = "verified" if spec["verified"] else "not verified"
            after = f", next: {spec['nextStep']}" if spec.get("nextStep") else ""
            lines.append(
                f"  {spec['checkpointId']} (seq {spec['seq']}, {verified}{after}) {cp['metadata']['name']}"
            )
    return "\n".join(lines)


def approval_grant(status: dict[str, Any], item_id: str) -> dict[str, str]:
    """The spec grant for one pending approval, named by approval id or operation id."""
    for item in status.get("pendingApprovals", []):
        if item_id in (item["approvalId"], item["operationId"]):
            return {
                "approvalId": item["approvalId"],
                "operationId": item["operationId"],
                "payloadSha256": item["payloadSha256"],
            }
    pending = ", ".join(i["approvalId"] for i in status.get("pendingApprovals", [])) or "none"
    raise PluginError(f"no pending approval {item_id!r} (pending: {pending})")


def _fail(error: PluginError) -> typer.Exit:
    typer.echo(f"error: {terminal.printable(terminal.one_line(str(error)))}", err=True)
    return typer.Exit(1)


def _session_and_checkpoints(
    name: str, namespace: str | None, kubeconfig: str | None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The AgentSession and its Checkpoints: all that a user with access to those reads. A person
    allowed AgentSessions only gets none (the status still says each subagent's progress)."""
    api, default_namespace, _ = _connect(kubeconfig)
    namespace = namespace or default_namespace
    session = _get(api, namespace, "agentsessions", name)
    return session, _checkpoints(api, namespace, name) or []


def _checkpoints(api: client.CustomObjectsApi, namespace: str, name: str) -> list[dict[str, Any]] | None:
    """The session's Checkpoint objects; None when this user may not list them."""
    try:
        listed = cast(
            dict[str, Any],
            api.list_namespaced_custom_object(
                GROUP, VERSION, namespace, "checkpoints", label_selector=f"belay.dev/session={name}"
            ),
        )
    except ApiException as error:
        if error.status == 403:
            return None
        raise PluginError(f"cannot list the checkpoints of {name}: {error.status} {error.reason}") from None
    return list(listed.get("items", []))


@app.command()
def brief(name: str, namespace: Namespace = None, kubeconfig: Kubeconfig = None) -> None:
    """Where the session stands: phase, what it waits on, approvals, deliverables, checkpoints."""
    try:
        api, default_namespace, _ = _connect(kubeconfig)
        namespace = namespace or default_namespace
        session = _get(api, namespace, "agentsessions", name)
        checkpoints = _checkpoints(api, namespace, name)
    except PluginError as error:
        raise _fail(error) from None
    note = (
        "\n(checkpoints not shown: you may not list Checkpoints in this namespace)"
        if checkpoints is None
        else ""
    )
    typer.echo(briefing(session, checkpoints or []) + note)


@app.command()
def approve(name: str, item_id: str, namespace: Namespace = None, kubeconfig: Kubeconfig = None) -> None:
    """Approve one pending operation for exactly the payload it asked for, or say yes to a wait."""
    try:
        api, default_namespace, user = _connect(kubeconfig)
        namespace = namespace or default_namespace
        status = _get(api, namespace, "agentsessions", name).get("status") or {}
        if item_id in _open_waits(status) and not _pending(status, item_id):
            typer.echo(_decide(api, namespace, name, user, {"id": item_id, "verdict": "yes", "by": user}))
            return
        grant: dict[str, str] = {}

        def change(session: dict[str, Any]) -> dict[str, Any] | None:
            grant.update(approval_grant(session.get("status") or {}, item_id))
            approvals = list(session["spec"].get("approvals") or [])
            if any(_same_grant(existing, grant) for existing in approvals):
                return None
            return {"approvals": [*approvals, grant]}

        if _update_spec(api, namespace, name, change, f"kubectl-belay/{user}") is None:
            typer.echo(f"{grant['approvalId']} is already approved in the spec")
            return
        typer.echo(f"approved {grant['approvalId']} for payload sha256 {grant['payloadSha256']}")
    except PluginError as error:
        raise _fail(error) from None


def rejection_entry(status: dict[str, Any], item_id: str, reason: str, by: str) -> dict[str, str]:
    """The spec rejection for one pending approval (by approval or operation id) or one published
    deliverable (by name), bound to the hash the status shows for it now."""
    if not reason.strip():
        raise PluginError('say why with --reason "...": the step is redone with it')
    for item in status.get("pendingApprovals", []):
        if item_id in (item["approvalId"], item["operationId"]):
            return {"item": item["approvalId"], "sha256": item["payloadSha256"], "reason": reason, "by": by}
    for item in status.get("deliverables", []):
        if item_id == item["name"]:
            return {"item": item["name"], "sha256": item["sha256"], "reason": reason, "by": by}
    pending = [i["approvalId"] for i in status.get("pendingApprovals", [])]
    published = [i["name"] for i in status.get("deliverables", [])]
    known = ", ".join(pending + published) or "none"
    raise PluginError(f"no pending approval or deliverable {item_id!r} (there are: {known})")


def amended_request(
    request: dict[str, Any],
    goal: str | None,
    parts: list[str],
    removed: list[str],
    manifest: dict[str, Any] | None,
) -> dict[str, Any]:
    """The request after the change; raises when it is malformed or changes nothing."""
    if manifest is not None:
        if goal is not None or parts or removed:
            raise PluginError("give either -f MANIFEST or --goal/--part/--remove-part, not both")
        wanted = (manifest.get("spec") or {}).get("request")
        if not isinstance(wanted, dict) or not wanted.get("goal"):
            raise PluginError("the manifest has no spec.request.goal")
        new = {"goal": wanted["goal"], "parts": dict(wanted.get("parts") or {})}
    else:
        new = {"goal": request["goal"], "parts": dict(request.get("parts") or {})}
    if goal is not None:
        if not goal.strip():
            raise PluginError("--goal cannot be empty")
        new["goal"] = goal
    for item in parts:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise PluginError(f"--part {item!r}: expected KEY=VALUE")
        new["parts"][key.strip()] = value
    for key in removed:
        if key not in new["parts"]:
            raise PluginError(f"--remove-part {key!r}: the request has no such part")
        del new["parts"][key]
    if new == {"goal": request["goal"], "parts": dict(request.get("parts") or {})}:
        raise PluginError("nothing changes: the request is already that")
    return new


def _request_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A merge patch from one request to another: a removed part is set to null."""
    parts: dict[str, Any] = dict(new["parts"])
    for key in old.get("parts") or {}:
        parts.setdefault(key, None)
    return {"goal": new["goal"], "parts": parts}


def _update_spec(
    api: client.CustomObjectsApi,
    namespace: str,
    name: str,
    change: Any,
    field_manager: str,
) -> dict[str, Any] | None:
    """Read the session, let `change(session)` give the spec patch (None: nothing to do), apply it
    as a compare-and-swap on the resourceVersion; a concurrent edit is read again and retried."""
    for _ in range(CONFLICT_RETRIES):
        session = _get(api, namespace, "agentsessions", name)
        spec_patch = change(session)
        if spec_patch is None:
            return None
        patch = {"metadata": {"resourceVersion": session["metadata"]["resourceVersion"]}, "spec": spec_patch}
        try:
            api.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, "agentsessions", name, patch, field_manager=field_manager
            )
        except ApiException as error:
            if error.status == 409:
                continue
            raise PluginError(f"cannot update {name}: {error.status} {error.reason}") from None
        return session
    raise PluginError(f"{name} kept changing; try again")


@app.command()
def reject(
    name: str,
    item_id: str,
    reason: Annotated[
        str, typer.Option("--reason", "-m", help="Why: whoever redoes the step reads it.")
    ] = "",
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Turn down a pending operation or a published deliverable (its step is redone with the
    reason), or say no to a wait."""
    try:
        api, default_namespace, user = _connect(kubeconfig)
        namespace = namespace or default_namespace
        status = _get(api, namespace, "agentsessions", name).get("status") or {}
        if item_id in _open_waits(status) and not _pending(status, item_id):
            decision = {"id": item_id, "verdict": "no", "text": reason, "by": user}
            typer.echo(_decide(api, namespace, name, user, decision))
            return
        entry: dict[str, str] = {}

        def change(session: dict[str, Any]) -> dict[str, Any] | None:
            entry.update(rejection_entry(session.get("status") or {}, item_id, reason, user))
            existing = list(session["spec"].get("rejections") or [])
            if any((r.get("item"), r.get("sha256")) == (entry["item"], entry["sha256"]) for r in existing):
                return None
            return {"rejections": [*existing, entry]}

        if _update_spec(api, namespace, name, change, f"kubectl-belay/{user}") is None:
            typer.echo(f"{entry['item']} (sha256 {entry['sha256']}) is already rejected in the spec")
            return
        typer.echo(
            f"rejected {entry['item']} (sha256 {entry['sha256']}); the operator records it and the step is "
            f"redone with your reason: kubectl belay brief {name}"
        )
    except PluginError as error:
        raise _fail(error) from None


@app.command()
def amend(
    name: str,
    goal: Annotated[str | None, typer.Option("--goal", help="The new goal.")] = None,
    parts: Annotated[list[str] | None, typer.Option("--part", metavar="KEY=VALUE")] = None,
    removed: Annotated[list[str] | None, typer.Option("--remove-part", metavar="KEY")] = None,
    manifest: Annotated[
        Path | None, typer.Option("--file", "-f", help="Take spec.request from a manifest.")
    ] = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Change the request (request version N+1): the work that depended on what changed is redone."""
    try:
        loaded = None
        if manifest is not None:
            try:
                loaded = yaml.safe_load(manifest.read_text())
            except (OSError, yaml.YAMLError) as error:
                raise PluginError(f"cannot read {manifest}: {error}") from None
            if not isinstance(loaded, dict):
                raise PluginError(f"{manifest}: not a manifest")
        api, default_namespace, user = _connect(kubeconfig)
        namespace = namespace or default_namespace

        def change(session: dict[str, Any]) -> dict[str, Any]:
            old = session["spec"]["request"]
            new = amended_request(old, goal, parts or [], removed or [], loaded)
            return {"request": _request_patch(old, new)}

        _update_spec(api, namespace, name, change, f"kubectl-belay/{user}")
        typer.echo(
            f"changed the request of {name} (by kubectl-belay/{user}); the operator records the next request "
            f"version, and the work that depended on what changed is redone: kubectl belay brief {name}"
        )
    except PluginError as error:
        raise _fail(error) from None


def _open_waits(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {w["waitId"]: w for w in status.get("waits") or []}


def _waiting(status: dict[str, Any]) -> str:
    items = [a["approvalId"] for a in status.get("pendingApprovals") or []] + sorted(_open_waits(status))
    return ", ".join(items) or "nothing waits on you"


def _pending(status: dict[str, Any], item_id: str) -> bool:
    """Whether the id names a pending approval or a published deliverable (what spec.rejections holds)."""
    approvals = {i for a in status.get("pendingApprovals") or [] for i in (a["approvalId"], a["operationId"])}
    return item_id in approvals or item_id in {d["name"] for d in status.get("deliverables") or []}


def _decide(
    api: client.CustomObjectsApi, namespace: str, name: str, user: str, decision: dict[str, str]
) -> str:
    """Write one decision into `spec.decisions`, for the operator to record under its claim."""

    def change(session: dict[str, Any]) -> dict[str, Any] | None:
        decisions = list(session["spec"].get("decisions") or [])
        earlier = next((d for d in decisions if d["id"] == decision["id"]), None)
        if earlier is not None:
            if earlier["verdict"] == decision["verdict"]:
                return None
            raise PluginError(f"{decision['id']} is already decided in the spec: {earlier['verdict']}")
        return {"decisions": [*decisions, decision]}

    written = _update_spec(api, namespace, name, change, f"kubectl-belay/{user}")
    said = f"{decision['verdict']} to {decision['id']}"
    if written is None:
        return f"{said} is already in the spec"
    return f"{said} written to spec.decisions; the operator records it in the session record"


def _check_open(
    api: client.CustomObjectsApi, namespace: str, name: str, item_id: str, *, approvals: bool = True
) -> None:
    status = _get(api, namespace, "agentsessions", name).get("status") or {}
    pending = {a["approvalId"] for a in status.get("pendingApprovals") or []} if approvals else set()
    if item_id not in pending and item_id not in _open_waits(status):
        raise PluginError(f"nothing {item_id!r} waits in {name} (waiting: {_waiting(status)})")


@app.command()
def answer(
    name: str,
    wait_id: Annotated[str, typer.Argument(metavar="WAIT")],
    text: Annotated[str, typer.Argument(help="Your answer.")],
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Answer a wait on the user with text; the session goes on."""
    try:
        api, default_namespace, user = _connect(kubeconfig)
        namespace = namespace or default_namespace
        _check_open(api, namespace, name, wait_id, approvals=False)
        decision = {"id": wait_id, "verdict": "yes", "text": text, "by": user}
        typer.echo(_decide(api, namespace, name, user, decision))
    except PluginError as error:
        raise _fail(error) from None


@app.command()
def reconcile(
    name: str,
    operation_id: Annotated[str, typer.Argument(metavar="OPERATION")],
    succeeded: Annotated[
        bool | None, typer.Option("--succeeded/--failed", help="Did the operation take effect?")
    ] = None,
    detail: Annotated[str, typer.Option("--detail", "-m")] = "",
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Settle an operation whose outcome is unknown: it took effect (--succeeded) or not (--failed)."""
    try:
        if succeeded is None:
            raise PluginError("say whether it took effect: --succeeded or --failed")
        api, default_namespace, user = _connect(kubeconfig)
        namespace = namespace or default_namespace
        status = _get(api, namespace, "agentsessions", name).get("status") or {}
        unknown = status.get("unknownOutcomes") or []
        if operation_id not in unknown:
            known = ", ".join(unknown) or "none"
            raise PluginError(
                f"operation {operation_id!r} has no unknown outcome (unknown outcomes: {known})"
            )
        verdict = "succeeded" if succeeded else "failed"
        decision = {"id": operation_id, "verdict": verdict, "text": detail, "by": user}
        typer.echo(_decide(api, namespace, name, user, decision))
    except PluginError as error:
        raise _fail(error) from None


@app.command()
def artifacts(
    words: Annotated[list[str], typer.Argument(metavar="NAME | get NAME FILE")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Where `get` writes the bytes.")
    ] = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """List a session's deliverables, or `artifacts get NAME FILE [-o PATH]` to download one
    through the short-lived URL the operator publishes (no store credentials needed)."""
    try:
        if words[0] == "get":
            if len(words) != 3:
                raise PluginError("usage: kubectl belay artifacts get NAME FILE [-o PATH]")
            _download(words[1], words[2], output, namespace, kubeconfig)
            return
        if len(words) != 1:
            raise PluginError("usage: kubectl belay artifacts NAME  |  kubectl belay artifacts get NAME FILE")
        api, default_namespace, _ = _connect(kubeconfig)
        status = _get(api, namespace or default_namespace, "agentsessions", words[0]).get("status") or {}
        rows = [
            [
                d["name"],
                d.get("subagent") or "-",
                str(d["size"]),
                d["sha256"],
                "yes" if d.get("readyForReview") else "-",
                d.get("command") or "-",
            ]
            for d in status.get("deliverables") or []
        ]
        if not rows:
            typer.echo(f"{words[0]} has published no deliverable yet")
            return
        typer.echo(columns(["NAME", "SUBAGENT", "SIZE", "SHA256", "REVIEW", "COMMAND"], rows))
    except PluginError as error:
        raise _fail(error) from None


def _download(
    name: str, file: str, output: Path | None, namespace: str | None, kubeconfig: str | None
) -> None:
    from belay.api.agentsession import is_plain_file_name

    api, default_namespace, _ = _connect(kubeconfig)
    status = _get(api, namespace or default_namespace, "agentsessions", name).get("status") or {}
    deliverables = {d["name"]: d for d in status.get("deliverables") or []}
    item = deliverables.get(file)
    if item is None:
        known = ", ".join(sorted(deliverables)) or "none"
        raise PluginError(f"{name} has no deliverable {file!r} (deliverables: {known})")
    if output is None and not is_plain_file_name(file):
        raise PluginError(f"{file!r} is not a plain file name: choose where to write it with -o PATH")
    data = _fetch(str(item.get("location") or ""), int(item["size"]), item["sha256"], file)
    target = output or Path(file)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    except OSError as error:
        raise PluginError(
            f"cannot write {target}: {error.strerror or error}; choose another -o PATH"
        ) from None
    typer.echo(f"wrote {target} ({len(data)} bytes, sha256 {item['sha256']})", err=True)


EVENTS_REQUEST_ANNOTATION = "belay.dev/events-request"
EVENTS_WAIT_S = 120.0


@app.command()
def events(
    name: str,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line.")] = False,
    from_seq: Annotated[int, typer.Option("--from", help="First seq to print.", min=1)] = 1,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """The session's events, in order: asked of the operator with an annotation, which exports
    them to the artifact store and publishes where to fetch them in the status."""
    try:
        api, default_namespace, _ = _connect(kubeconfig)
        namespace = namespace or default_namespace
        request = f"{from_seq}/{secrets.token_hex(8)}"
        patch = {"metadata": {"annotations": {EVENTS_REQUEST_ANNOTATION: request}}}
        try:
            api.patch_namespaced_custom_object(GROUP, VERSION, namespace, "agentsessions", name, patch)
        except ApiException as error:
            if error.status == 404:
                raise PluginError(f"no AgentSession {name!r} in namespace {namespace!r}") from None
            raise PluginError(
                f"cannot ask for the events of {name}: {error.status} {_reason(error)}"
            ) from None
        export = _await_export(api, namespace, name, request)
        data = _fetch(export["location"], int(export["size"]), export["sha256"], f"the events of {name}")
    except PluginError as error:
        raise _fail(error) from None
    for line in data.decode().splitlines():
        if as_json:
            typer.echo(line)
            continue
        event = event_from_json(_with_session(line, name))
        shown = progress_line(event) or f"{event.seq:>4} {event.type}"
        # The command a line names is spelled for kubectl here.
        shown = shown.replace(": " + commands.LOCAL_CLI, ": " + commands.CLUSTER_CLI)
        typer.echo(terminal.printable(shown))


def _with_session(line: str, name: str) -> str:
    """An exported line with the session id the event model requires (the export leaves it out)."""
    item = json.loads(line)
    item["session_id"] = name
    return json.dumps(item)


def _await_export(api: client.CustomObjectsApi, namespace: str, name: str, request: str) -> dict[str, Any]:
    """Watch the session until its status answers the request."""

    def answered(status: dict[str, Any]) -> dict[str, Any] | None:
        export = status.get("eventsExport") or {}
        return export if export.get("request") == request else None

    found = _await_status(api, namespace, name, answered, EVENTS_WAIT_S)
    if found is None:
        raise PluginError(
            f"the operator did not export the events of {name} within {EVENTS_WAIT_S:.0f} s; "
            "is it running? (kubectl get agentsession shows whether it observes the session)"
        )
    return found


def _await_status(
    api: client.CustomObjectsApi,
    namespace: str,
    name: str,
    answered: Callable[[dict[str, Any]], dict[str, Any] | None],
    timeout_s: float,
) -> dict[str, Any] | None:
    """Watch one session until `answered(status)` gives something; None when the time is up."""
    from kubernetes import watch as kube_watch

    watcher = kube_watch.Watch()
    try:
        for change in watcher.stream(
            api.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            "agentsessions",
            field_selector=f"metadata.name={name}",
            timeout_seconds=int(timeout_s),
        ):
            found = answered(change["object"].get("status") or {})
            if found is not None:
                watcher.stop()
                return found
    except ApiException as error:
        raise PluginError(f"cannot watch {name}: {error.status} {_reason(error)}") from None
    return None


DRILL_REQUEST_ANNOTATION = "belay.dev/drill-request"


@app.command()
def drill(
    name: str,
    at: Annotated[
        list[str],
        typer.Option("--at", help="A fault point (`<event type>:<identity>`, as `belay drill` names them)."),
    ],
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for the verdict.")] = True,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the verdict.")] = 1800.0,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """The interruption drill in the cluster: the operator runs a copy of the session whose k-th
    attempt stops itself at the k-th point, replaces each, and checks that the copy completes
    without repeating a step and delivers the same bytes as the session."""
    try:
        if any(not p or "," in p or ":" not in p for p in at):
            raise PluginError("each --at is one fault point, `<event type>:<identity>`, without commas")
        api, default_namespace, _ = _connect(kubeconfig)
        namespace = namespace or default_namespace
        nonce = secrets.token_hex(4)
        request = json.dumps({"nonce": nonce, "points": at})
        patch = {"metadata": {"annotations": {DRILL_REQUEST_ANNOTATION: request}}}
        try:
            api.patch_namespaced_custom_object(GROUP, VERSION, namespace, "agentsessions", name, patch)
        except ApiException as error:
            if error.status == 404:
                raise PluginError(f"no AgentSession {name!r} in namespace {namespace!r}") from None
            raise PluginError(f"cannot ask for a drill of {name}: {error.status} {_reason(error)}") from None
        if not wait:
            typer.echo(f"drill {nonce} of {name} asked for; its verdict will be in status.drill")
            return

        def judged(status: dict[str, Any]) -> dict[str, Any] | None:
            report = status.get("drill") or {}
            return report if report.get("request") == nonce and report.get("passed") is not None else None

        report = _await_status(api, namespace, name, judged, timeout)
        if report is None:
            raise PluginError(f"drill {nonce} of {name} has no verdict after {timeout:.0f} s; try --timeout")
    except PluginError as error:
        raise _fail(error) from None
    typer.echo(json.dumps(report, sort_keys=True) if as_json else _drill_lines(report))
    if not report["passed"]:
        raise typer.Exit(1)


def _drill_lines(report: dict[str, Any]) -> str:
    verdict = "passed" if report["passed"] else "FAILED"
    lines = [
        f"drill {report['request']} {verdict}: the copy {report['session']} {report['phase']} after "
        f"{report.get('attemptsLost', 0)} lost attempt(s), stopped at {', '.join(report['points'])}"
    ]
    for item in report.get("deliverables") or []:
        same = "same bytes" if item["sha256"] and item["sha256"] == item["sourceSha256"] else "DIFFERENT"
        lines.append(
            f"  {item['name']}: {same} (copy {item['sha256'] or '-'}, session {item['sourceSha256'] or '-'})"
        )
    for twice in report.get("stepsRunTwice") or []:
        lines.append(f"  repeated: {twice}")
    return "\n".join(lines)


def _fetch(location: str, size: int, sha256: str, what: str) -> bytes:
    """Bytes through a URL the operator published, checked against their recorded size and hash."""
    if urllib.parse.urlsplit(location).scheme not in ("http", "https"):
        raise PluginError(
            f"{what} are in an artifact store that publishes no URL ({location}); "
            "only an S3 store gives one that can be fetched from outside the cluster"
        )
    try:
        with urllib.request.urlopen(location, timeout=60) as answer:  # http(s) only, checked above
            data = bytes(answer.read(size + 1))
    except (urllib.error.URLError, OSError) as error:
        raise PluginError(
            f"cannot fetch {what}: {error}; the URL is renewed by the operator, so try again"
        ) from None
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
        raise PluginError(f"{what} as fetched do not match their recorded sha256 {sha256}; nothing written")
    return data


def _reason(error: ApiException) -> str:
    """The apiserver's own message (a validation rule's, say), else the HTTP reason."""
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except (ValueError, AttributeError):
        return str(error.reason)


def _same_grant(existing: dict[str, Any], grant: dict[str, str]) -> bool:
    names_it = (
        existing.get("approvalId") == grant["approvalId"]
        or existing.get("operationId") == grant["operationId"]
    )
    return names_it and existing.get("payloadSha256") == grant["payloadSha256"]


# --------------------------------------------------------------------------------------------------
# The timeline report, from what the status and the Checkpoints hold


def _moment(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def status_report(
    session: dict[str, Any], checkpoints: list[dict[str, Any]], *, now: datetime
) -> SessionReport:
    """The report of a session as a user with AgentSession and Checkpoint access sees it: the
    status keeps no history, so the timeline has each checkpoint (when its object was created),
    the interruption under way, and what waits now; the briefing is `kubectl belay brief`'s."""
    name = session["metadata"]["name"]
    status = session.get("status") or {}
    by_subagent: dict[str, list[dict[str, Any]]] = {}
    for cp in sorted(checkpoints, key=lambda c: c["spec"]["seq"]):
        by_subagent.setdefault(cp["spec"].get("subagent") or "", []).append(cp)
    rows: list[Row] = []  # the status has no attempt's start or end: no attempts row
    steps = []
    for subagent, owned in by_subagent.items():
        rows.append(Row(kind="subagent", label=subagent or "the session"))
        for cp in owned:
            spec = cp["spec"]
            created = _moment(cp["metadata"].get("creationTimestamp"))
            verified = "verified" if spec["verified"] else "not verified"
            marks = []
            if created is not None:
                label = f"checkpoint {spec['checkpointId']} (seq {spec['seq']}, {verified})"
                marks.append(Mark(kind="checkpoint", at=created, label=label, ok=spec["verified"]))
            rows.append(Row(kind="step", label=spec["checkpointId"], marks=marks))
            steps.append(
                StepEntry(
                    step_id=spec["checkpointId"],
                    subagent=subagent,
                    title=f"checkpoint at seq {spec['seq']}",
                    status=verified,
                    ended=created,
                )
            )
    gaps = []
    gone = status.get("interruption")
    since = _moment(gone.get("since")) if gone else None
    if gone and since is not None:
        gaps.append(
            Gap(
                attempt=gone["attempt"],
                start=since,
                why=gone["why"],
                doing=gone["doing"],
                next=gone.get("next", ""),
            )
        )
    # The status has no time for a single wait; its condition says since when the session has
    # waited on that kind, which is when the first of those waits opened.
    waiting_since = {
        c["type"]: _moment(c.get("lastTransitionTime"))
        for c in status.get("conditions", [])
        if c.get("status") == "True"
    }
    waits = [
        WaitEntry(
            wait_id=item["approvalId"],
            kind="approval",
            on=f"you: approve {item['tool']}",
            reason=item.get("summary", ""),
            opened=waiting_since.get("WaitingOnUser"),
        )
        for item in status.get("pendingApprovals", [])
    ]
    kinds: dict[str, tuple[WaitEntryKind, str]] = {
        "on_user": ("on_user", "WaitingOnUser"),
        "on_external": ("on_external", "WaitingOnExternal"),
        "ready_for_review": ("review", "ReadyForReview"),
    }
    for wait in status.get("waits", []):
        kind, condition = kinds.get(wait["kind"], ("on_user", "WaitingOnUser"))
        waits.append(
            WaitEntry(
                wait_id=wait["waitId"],
                kind=kind,
                on=wait.get("condition") or ("your review" if kind == "review" else "you"),
                reason=wait.get("reason", ""),
                opened=waiting_since.get(condition),
            )
        )
    waiting = [w for w in waits if w.opened is not None]
    if waiting:
        rows.append(Row(kind="subagent", label="waiting now"))
        rows += [
            Row(
                kind="wait",
                label=w.wait_id,
                title=f"{w.wait_id}: {w.reason}",
                bars=[
                    Bar(
                        kind=WAIT_BAR_KIND[w.kind],
                        label=w.wait_id,
                        start=w.opened,
                        detail=f"waits on {w.on} (at most this long: since the session began waiting on it)",
                    )
                ],
            )
            for w in waiting
            if w.opened is not None
        ]
    deliverables = [
        DeliverableEntry(
            name=item["name"],
            subagent=item.get("subagent") or "",
            size=item.get("size"),
            sha256=item.get("sha256", ""),
            command=_fetch_command(item),
            location=item.get("location", ""),
            ready_for_review=bool(item.get("readyForReview")),
        )
        for item in status.get("deliverables", [])
    ]
    lines = briefing(session, checkpoints).splitlines()
    return SessionReport(
        session_id=name,
        phase=status.get("phase", "Pending"),
        goal=session["spec"]["request"]["goal"].strip(),
        now=now,
        source=(
            f"the AgentSession's status and its {len(checkpoints)} Checkpoint objects, which keep no history "
            "of steps, calls and waits: a wait's length is since its condition turned true "
            "(`belay report` where the record can be read shows every step, call and wait)"
        ),
        rows=rows,
        gaps=gaps,
        scope_changes=[],
        steps=steps,
        waits=waits,
        deliverables=deliverables,
        briefing=[((len(line) - len(line.lstrip(" "))) // 2, line.strip()) for line in lines],
        harness_lost_untimed=int(status.get("harnessLost", 0)),
        progress=", ".join(
            f"{s['name']} {s.get('done', 0)} of {s.get('tasks', 0)} tasks"
            for s in status.get("subagents", [])
        ),
    )


def _fetch_command(deliverable: dict[str, Any]) -> str:
    """How a cluster user fetches a deliverable: the presigned URL the status carries, with curl
    (quoted: the name is a model's choice); a location that is no URL is shown as it is."""
    location = str(deliverable.get("location", ""))
    if not location.startswith(("https://", "http://")):
        return ""
    target = posixpath.basename(str(deliverable["name"])) or "deliverable"
    return f"curl -fsSL -o {shlex.quote(target)} {shlex.quote(location)}"


def _sessions_named(
    names: list[str], selector: str | None, namespace: str | None, kubeconfig: str | None
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each session named, or each that the label selector picks, with its Checkpoints."""
    if bool(names) == bool(selector):
        raise PluginError(
            "name the sessions, or pick them with -l SELECTOR (such as -l team=parsers), not both"
        )
    if selector:
        api, default_namespace, _ = _connect(kubeconfig)
        try:
            listed = cast(
                dict[str, Any],
                api.list_namespaced_custom_object(
                    GROUP, VERSION, namespace or default_namespace, "agentsessions", label_selector=selector
                ),
            )
        except ApiException as error:
            raise PluginError(
                f"cannot list AgentSessions with {selector!r}: {error.status} {error.reason}"
            ) from None
        names = sorted(item["metadata"]["name"] for item in listed.get("items", []))
        if not names:
            raise PluginError(
                f"no AgentSession matches -l {selector!r} in namespace {namespace or default_namespace!r}"
            )
    return [_session_and_checkpoints(name, namespace, kubeconfig) for name in dict.fromkeys(names)]


@app.command()
def report(
    names: Annotated[
        list[str] | None, typer.Argument(metavar="NAME...", help="One session or several.")
    ] = None,
    selector: Annotated[
        str | None,
        typer.Option("--selector", "-l", help="The sessions with these labels, e.g. -l team=parsers."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Where to write the page (default ./NAME-report.html)."),
    ] = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """The timeline as one HTML file that opens without a network, from what `kubectl belay brief`
    reads: the status and the Checkpoints. Several sessions share one time axis."""
    try:
        found = _sessions_named(names or [], selector, namespace, kubeconfig)
    except PluginError as error:
        raise _fail(error) from None
    now = datetime.now(UTC)
    page = render_html(
        [status_report(session, checkpoints, now=now) for session, checkpoints in found]
    ).encode()
    first = found[0][0]["metadata"]["name"]
    target = output or Path(f"{first}-report.html")
    if target.is_dir():
        target = target / f"{first}-report.html"
    try:
        target.write_bytes(page)
    except OSError as error:
        raise _fail(
            PluginError(f"cannot write {target}: {error.strerror or error}; choose another -o PATH")
        ) from None
    typer.echo(f"wrote {target} ({len(page)} bytes); open it in a browser, it needs no network", err=True)


# --------------------------------------------------------------------------------------------------
# The fleet: many sessions at a glance, and an objective's sessions

AllNamespaces = Annotated[bool, typer.Option("--all-namespaces", "-A", help="Sessions of every namespace.")]
Selector = Annotated[str, typer.Option("--selector", "-l", help="A label selector, as kubectl takes it.")]


def fleet_rows(items: list[dict[str, Any]], *, all_namespaces: bool, now: Any) -> list[Any]:
    """The fleet rows of AgentSession objects: their status, as the operator projected it, with
    every command spelled for kubectl (and `-n NAMESPACE` when listing every namespace)."""
    from belay.journal import commands
    from belay.journal.fleet import fleet_row

    rows = []
    for item in items:
        meta = item["metadata"]
        namespace = meta.get("namespace")

        def style(command: str, namespace: str | None = namespace) -> str:
            return commands.in_cluster(command, namespace if all_namespaces else None)

        rows.append(
            fleet_row(
                meta["name"],
                item.get("status"),
                now=now,
                labels=meta.get("labels") or {},
                namespace=namespace if all_namespaces else None,
                style=style,
            )
        )
    return rows


def _list_sessions(
    api: client.CustomObjectsApi, namespace: str | None, selector: str
) -> tuple[list[dict[str, Any]], str]:
    """The AgentSessions (of one namespace, or of all with None) and the list's resourceVersion."""
    try:
        if namespace is None:
            listed = api.list_cluster_custom_object(GROUP, VERSION, "agentsessions", label_selector=selector)
        else:
            listed = api.list_namespaced_custom_object(
                GROUP, VERSION, namespace, "agentsessions", label_selector=selector
            )
    except ApiException as error:
        where = "every namespace" if namespace is None else f"namespace {namespace!r}"
        raise PluginError(f"cannot list AgentSessions in {where}: {error.status} {error.reason}") from None
    listed = cast(dict[str, Any], listed)
    return list(listed.get("items", [])), str(listed.get("metadata", {}).get("resourceVersion", ""))


def _show_fleet(
    kubeconfig: str | None, namespace: str | None, all_namespaces: bool, selector: str, watch: bool, show: Any
) -> None:
    """Print once, or (watching) again on every change the apiserver reports, until Ctrl-C."""
    from datetime import UTC, datetime

    from kubernetes import watch as kube_watch

    from belay.local.fleet import without_clock

    api, default_namespace, _ = _connect(kubeconfig)
    where = None if all_namespaces else (namespace or default_namespace)
    items, version = _list_sessions(api, where, selector)

    def render() -> tuple[str, list[dict[str, object]]]:
        rows = fleet_rows(items, all_namespaces=all_namespaces, now=datetime.now(UTC))
        return show(rows), without_clock(rows)

    text, shown = render()
    typer.echo(text)
    if not watch:
        return
    by_key = {(i["metadata"].get("namespace"), i["metadata"]["name"]): i for i in items}
    if where is None:
        lister: Any = api.list_cluster_custom_object
        args: tuple[Any, ...] = (GROUP, VERSION, "agentsessions")
    else:
        lister = api.list_namespaced_custom_object
        args = (GROUP, VERSION, where, "agentsessions")
    watcher = kube_watch.Watch()
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            try:
                for change in watcher.stream(
                    lister, *args, label_selector=selector, resource_version=version
                ):
                    obj = change["object"]
                    key = (obj["metadata"].get("namespace"), obj["metadata"]["name"])
                    version = obj["metadata"].get("resourceVersion", version)
                    if change["type"] == "DELETED":
                        by_key.pop(key, None)
                    else:
                        by_key[key] = obj
                    items = list(by_key.values())
                    text, rows = render()
                    if rows != shown:
                        shown = rows
                        typer.echo(text)
            except ApiException as error:
                if error.status != 410:  # a resourceVersion too old: list again and go on
                    raise PluginError(f"the watch ended: {error.status} {error.reason}") from None
                items, version = _list_sessions(api, where, selector)
                by_key = {(i["metadata"].get("namespace"), i["metadata"]["name"]): i for i in items}


@app.command()
def sessions(
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    selector: Selector = "",
    as_json: Annotated[bool, typer.Option("--json", help="Rows and summary as JSON.")] = False,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Print again on every change, until Ctrl-C.")
    ] = False,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Every session: phase, what it waits on (you, an external condition, your review), the
    kubectl command that unblocks it, deliverables, age of the last event; and a summary."""
    from belay.journal.fleet import fleet_view, render_fleet

    def show(rows: list[Any]) -> str:
        view = fleet_view(rows)
        return view.model_dump_json() if as_json else render_fleet(view, with_namespace=all_namespaces)

    try:
        _show_fleet(kubeconfig, namespace, all_namespaces, selector, watch, show)
    except PluginError as error:
        raise _fail(error) from None


@app.command()
def objective(
    name: Annotated[str, typer.Argument(metavar="OBJECTIVE", help="The belay.dev/objective label value.")],
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    watch: Annotated[bool, typer.Option("--watch", "-w")] = False,
    kubeconfig: Kubeconfig = None,
) -> None:
    """The sessions that serve one objective: each one's part and deliverables, and what the
    whole waits on."""
    from belay.journal.fleet import OBJECTIVE_LABEL, objective_view, render_objective

    def show(rows: list[Any]) -> str:
        view = objective_view(name, rows)
        return view.model_dump_json() if as_json else render_objective(view, with_namespace=all_namespaces)

    try:
        _show_fleet(kubeconfig, namespace, all_namespaces, f"{OBJECTIVE_LABEL}={name}", watch, show)
    except PluginError as error:
        raise _fail(error) from None


def main() -> None:
    app(prog_name="kubectl-belay")


if __name__ == "__main__":
    main()
