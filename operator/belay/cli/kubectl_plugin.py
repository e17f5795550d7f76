"""`kubectl belay`: the person's view of sessions in a cluster, for someone who may read and patch
AgentSessions and nothing else (no store credentials, no pods, no Secrets).

    kubectl belay sessions [-A] [-l SELECTOR] [--json] [--watch]   the fleet view
    kubectl belay objective OBJECTIVE                              the sessions of one objective
    kubectl belay brief NAME                                       where the session stands, from its status
    kubectl belay approve NAME ID        approve one operation (its payload hash), or yes to a wait
    kubectl belay reject NAME ID         reject one pending operation, or no to a wait
    kubectl belay answer NAME WAIT TEXT  answer a wait on the user
    kubectl belay reconcile NAME OPERATION --succeeded|--failed
    kubectl belay amend NAME [--goal TEXT] [--part K=V] [--drop-part K]   change the request
    kubectl belay artifacts NAME | artifacts get NAME FILE [-o PATH]
    kubectl belay events NAME [--json] [--from SEQ]

An approval is written into the session's spec (`spec.approvals`), exactly as a GitOps change
would: the operator records it in the session record, and only for the payload hash the pending
request carries, so a payload that changed since is not approved. The other decisions go into
`spec.decisions`, which the operator records under the same claims the local commands take; an
amended request is recorded as a scope change. A deliverable is fetched through the short-lived
URL the operator publishes in the status (an S3 store's presigned URL), never with store
credentials; so are the events, which the operator exports when the annotation
`belay.dev/events-request` asks for them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from belay.cli import terminal
from belay.cli.main import progress_line
from belay.journal import commands
from belay.journal.events import event_from_json
from belay.journal.fleet import columns

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
By = Annotated[str, typer.Option("--by", help="Who decides, as the record names them.")]


class PluginError(Exception):
    pass


def _api(kubeconfig: str | None) -> tuple[client.CustomObjectsApi, str]:
    try:
        api_client = config.new_client_from_config(config_file=kubeconfig)
        _, context = config.list_kube_config_contexts(config_file=kubeconfig)
    except (config.ConfigException, FileNotFoundError) as error:
        raise PluginError(f"cannot load kubeconfig: {error}") from None
    namespace = (context or {}).get("context", {}).get("namespace") or "default"
    return client.CustomObjectsApi(api_client), namespace


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
            lines.append(
                f"  {item['approvalId']}: {item['tool']} {item.get('summary', '')}".rstrip()
                + f"\n    payload sha256 {item['payloadSha256']}"
                + f"\n    kubectl belay approve {name} {item['approvalId']}"
            )
    for wait in status.get("waits", []):
        lines.append(f"waits: {wait['kind']} {wait['waitId']}: {wait['reason']}")
    deliverables = status.get("deliverables", [])
    if deliverables:
        lines.append("deliverables:")
        for item in deliverables:
            review = " (ready for review)" if item.get("readyForReview") else ""
            lines.append(f"  {item['name']}{review}: {item['size']} bytes, sha256 {item['sha256']}")
            lines.append(f"    {item['location']}")
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


@app.command()
def brief(name: str, namespace: Namespace = None, kubeconfig: Kubeconfig = None) -> None:
    """Where the session stands: phase, what it waits on, approvals, deliverables, checkpoints."""
    try:
        api, default_namespace = _api(kubeconfig)
        namespace = namespace or default_namespace
        session = _get(api, namespace, "agentsessions", name)
        checkpoints, note = _checkpoints(api, namespace, name)
    except PluginError as error:
        raise _fail(error) from None
    typer.echo(briefing(session, checkpoints) + note)


def _checkpoints(api: client.CustomObjectsApi, namespace: str, name: str) -> tuple[list[dict[str, Any]], str]:
    """The session's Checkpoint objects; a person allowed AgentSessions only is briefed without
    them (the status still says each subagent's progress), and told so."""
    try:
        listed = api.list_namespaced_custom_object(
            GROUP, VERSION, namespace, "checkpoints", label_selector=f"belay.dev/session={name}"
        )
    except ApiException as error:
        if error.status == 403:
            return [], "\n(checkpoints not shown: you may not list Checkpoints in this namespace)"
        raise PluginError(f"cannot list checkpoints of {name}: {error.status} {error.reason}") from None
    return list(cast(dict[str, Any], listed).get("items", [])), ""


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
        api, default_namespace = _api(kubeconfig)
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
    from kubernetes import watch as kube_watch

    watcher = kube_watch.Watch()
    for change in watcher.stream(
        api.list_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        "agentsessions",
        field_selector=f"metadata.name={name}",
        timeout_seconds=int(EVENTS_WAIT_S),
    ):
        export = (change["object"].get("status") or {}).get("eventsExport") or {}
        if export.get("request") == request:
            watcher.stop()
            return cast(dict[str, Any], export)
    raise PluginError(
        f"the operator did not export the events of {name} within {EVENTS_WAIT_S:.0f} s; "
        "is it running? (kubectl get agentsession shows whether it observes the session)"
    )


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


def _patch_spec(
    api: client.CustomObjectsApi,
    namespace: str,
    name: str,
    change: Callable[[dict[str, Any]], dict[str, Any] | None],
) -> bool:
    """Merge `change(session)` into the spec as a compare-and-swap on the resourceVersion,
    reading again after a concurrent edit; False when `change` had nothing to write."""
    for _ in range(CONFLICT_RETRIES):
        session = _get(api, namespace, "agentsessions", name)
        spec_patch = change(session)
        if spec_patch is None:
            return False
        patch = {"metadata": {"resourceVersion": session["metadata"]["resourceVersion"]}, "spec": spec_patch}
        try:
            api.patch_namespaced_custom_object(GROUP, VERSION, namespace, "agentsessions", name, patch)
        except ApiException as error:
            if error.status == 409:
                continue
            raise PluginError(f"cannot update {name}: {error.status} {_reason(error)}") from None
        return True
    raise PluginError(f"{name} kept changing; try again")


def _reason(error: ApiException) -> str:
    """The apiserver's own message (a validation rule's, say), else the HTTP reason."""
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except (ValueError, AttributeError):
        return str(error.reason)


def _open_waits(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {w["waitId"]: w for w in status.get("waits") or []}


def _waiting(status: dict[str, Any]) -> str:
    items = [a["approvalId"] for a in status.get("pendingApprovals") or []] + sorted(_open_waits(status))
    return ", ".join(items) or "nothing waits on you"


def _decide(name: str, namespace: str | None, kubeconfig: str | None, decision: dict[str, str]) -> str:
    """Write one decision into `spec.decisions`, for the operator to record under its claim."""
    api, default_namespace = _api(kubeconfig)
    namespace = namespace or default_namespace

    def change(session: dict[str, Any]) -> dict[str, Any] | None:
        decisions = list(session["spec"].get("decisions") or [])
        earlier = next((d for d in decisions if d["id"] == decision["id"]), None)
        if earlier is not None:
            if earlier["verdict"] == decision["verdict"]:
                return None
            raise PluginError(f"{decision['id']} is already decided in the spec: {earlier['verdict']}")
        return {"decisions": [*decisions, decision]}

    written = _patch_spec(api, namespace, name, change)
    said = f"{decision['verdict']} to {decision['id']}"
    if not written:
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
def approve(
    name: str,
    item_id: Annotated[str, typer.Argument(metavar="ID", help="An approval id, or a wait id (a yes).")],
    namespace: Namespace = None,
    by: By = "kubectl",
    kubeconfig: Kubeconfig = None,
) -> None:
    """Approve one pending operation for exactly the payload it asked for, or say yes to a wait."""
    try:
        api, default_namespace = _api(kubeconfig)
        namespace = namespace or default_namespace
        status = _get(api, namespace, "agentsessions", name).get("status") or {}
        if item_id in _open_waits(status):
            typer.echo(_decide(name, namespace, kubeconfig, {"id": item_id, "verdict": "yes", "by": by}))
            return
        approved: dict[str, str] = {}

        def change(session: dict[str, Any]) -> dict[str, Any] | None:
            grant = approval_grant(session.get("status") or {}, item_id)
            approved.update(grant)
            approvals = list(session["spec"].get("approvals") or [])
            if any(_same_grant(existing, grant) for existing in approvals):
                return None
            return {"approvals": [*approvals, grant]}

        if not _patch_spec(api, namespace, name, change):
            typer.echo(f"{approved['approvalId']} is already approved in the spec")
            return
        typer.echo(f"approved {approved['approvalId']} for payload sha256 {approved['payloadSha256']}")
    except PluginError as error:
        raise _fail(error) from None


@app.command()
def reject(
    name: str,
    item_id: Annotated[str, typer.Argument(metavar="ID", help="An approval id, or a wait id (a no).")],
    reason: Annotated[str, typer.Option("--reason", "-m")] = "",
    namespace: Namespace = None,
    by: By = "kubectl",
    kubeconfig: Kubeconfig = None,
) -> None:
    """Reject one pending operation (it is never dispatched), or say no to a wait."""
    try:
        api, default_namespace = _api(kubeconfig)
        _check_open(api, namespace or default_namespace, name, item_id)
        decision = {"id": item_id, "verdict": "no", "text": reason, "by": by}
        typer.echo(_decide(name, namespace, kubeconfig, decision))
    except PluginError as error:
        raise _fail(error) from None


@app.command()
def answer(
    name: str,
    wait_id: Annotated[str, typer.Argument(metavar="WAIT")],
    text: Annotated[str, typer.Argument(help="Your answer.")],
    namespace: Namespace = None,
    by: By = "kubectl",
    kubeconfig: Kubeconfig = None,
) -> None:
    """Answer a wait on the user with text; the session goes on."""
    try:
        api, default_namespace = _api(kubeconfig)
        _check_open(api, namespace or default_namespace, name, wait_id, approvals=False)
        decision = {"id": wait_id, "verdict": "yes", "text": text, "by": by}
        typer.echo(_decide(name, namespace, kubeconfig, decision))
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
    by: By = "kubectl",
    kubeconfig: Kubeconfig = None,
) -> None:
    """Settle an operation whose outcome is unknown: it took effect (--succeeded) or not (--failed)."""
    try:
        if succeeded is None:
            raise PluginError("say whether it took effect: --succeeded or --failed")
        api, default_namespace = _api(kubeconfig)
        status = _get(api, namespace or default_namespace, "agentsessions", name).get("status") or {}
        unknown = status.get("unknownOutcomes") or []
        if operation_id not in unknown:
            known = ", ".join(unknown) or "none"
            raise PluginError(
                f"operation {operation_id!r} has no unknown outcome (unknown outcomes: {known})"
            )
        verdict = "succeeded" if succeeded else "failed"
        decision = {"id": operation_id, "verdict": verdict, "text": detail, "by": by}
        typer.echo(_decide(name, namespace, kubeconfig, decision))
    except PluginError as error:
        raise _fail(error) from None


@app.command()
def amend(
    name: str,
    goal: Annotated[str | None, typer.Option("--goal", help="The new goal.")] = None,
    part: Annotated[
        list[str] | None, typer.Option("--part", help="KEY=VALUE: set one part of the request.")
    ] = None,
    drop_part: Annotated[list[str] | None, typer.Option("--drop-part", help="KEY: remove one part.")] = None,
    namespace: Namespace = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Change the request (goal, parts): the operator records the change as a scope change, which
    the running attempt reads from the record."""
    try:
        changed: dict[str, Any] = {}
        if goal is not None:
            changed["goal"] = goal
        parts: dict[str, str | None] = {}
        for item in part or []:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise PluginError(f"--part {item!r}: write KEY=VALUE")
            parts[key] = value
        for key in drop_part or []:
            parts[key] = None  # a merge patch removes a key set to null
        if parts:
            changed["parts"] = parts
        if not changed:
            raise PluginError("nothing to amend: give --goal, --part KEY=VALUE or --drop-part KEY")
        api, default_namespace = _api(kubeconfig)
        namespace = namespace or default_namespace

        def change(session: dict[str, Any]) -> dict[str, Any] | None:
            request = session["spec"]["request"]
            current = request.get("parts") or {}
            same_goal = "goal" not in changed or changed["goal"] == request["goal"]
            same_parts = all(current.get(k) == v for k, v in parts.items())
            return None if same_goal and same_parts else {"request": changed}

        if _patch_spec(api, namespace, name, change):
            typer.echo(f"amended the request of {name}; the operator records the scope change")
        else:
            typer.echo(f"the request of {name} already says that")
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
        api, default_namespace = _api(kubeconfig)
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

    api, default_namespace = _api(kubeconfig)
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


def _same_grant(existing: dict[str, Any], grant: dict[str, str]) -> bool:
    names_it = (
        existing.get("approvalId") == grant["approvalId"]
        or existing.get("operationId") == grant["operationId"]
    )
    return names_it and existing.get("payloadSha256") == grant["payloadSha256"]


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

    api, default_namespace = _api(kubeconfig)
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
