"""What `kubectl belay` asks of the apiserver: the AgentSessions and their Checkpoints, read and
typed; a change to a session's spec as a compare-and-swap; a watch until the status answers; and
bytes fetched through a URL the operator published. A user who may read and patch AgentSessions
needs nothing else: no store credentials, no pods, no Secrets."""

from __future__ import annotations

import hashlib
import json
import os
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from kubernetes import client, config
from kubernetes import watch as kube_watch
from kubernetes.client.exceptions import ApiException

from belay.api.agentsession import AgentSession, ManifestError, parse_manifest
from belay.cli.core.errors import CommandError
from belay.views.report.from_status import CheckpointObject

GROUP, VERSION = "belay.dev", "v1alpha1"
CONFLICT_RETRIES = 5

# Which cluster and namespace a `kubectl belay` command speaks to.
Namespace = Annotated[
    str | None, typer.Option("--namespace", "-n", help="default: the kubeconfig's namespace")
]
Kubeconfig = Annotated[str | None, typer.Option("--kubeconfig", envvar="KUBECONFIG", help="kubeconfig file")]


@dataclass(frozen=True)
class Cluster:
    """The API, the kubeconfig context's namespace, and its user (who an approval or a change is by)."""

    api: client.CustomObjectsApi
    namespace: str
    user: str

    @classmethod
    def connect(cls, kubeconfig: str | None) -> Cluster:
        try:
            api_client = config.new_client_from_config(config_file=kubeconfig)
            _, context = config.list_kube_config_contexts(config_file=kubeconfig)
        except (config.ConfigException, FileNotFoundError) as error:
            raise CommandError(f"cannot load kubeconfig: {error}") from None
        details = (context or {}).get("context", {})
        namespace = details.get("namespace") or "default"
        return cls(client.CustomObjectsApi(api_client), namespace, str(details.get("user") or "unknown"))

    @property
    def field_manager(self) -> str:
        return f"kubectl-belay/{self.user}"

    def raw(self, namespace: str, name: str) -> dict[str, Any]:
        """The AgentSession as the apiserver returns it."""
        try:
            return cast(
                dict[str, Any],
                self.api.get_namespaced_custom_object(GROUP, VERSION, namespace, "agentsessions", name),
            )
        except ApiException as error:
            if error.status == 404:
                raise CommandError(f"no AgentSession {name!r} in namespace {namespace!r}") from None
            raise CommandError(f"cannot read agentsessions/{name}: {error.status} {error.reason}") from None

    def session(self, namespace: str, name: str) -> AgentSession:
        """The AgentSession, typed: spec and status as the API models read them."""
        return typed(self.raw(namespace, name))

    def checkpoints(self, namespace: str, name: str) -> list[CheckpointObject] | None:
        """The session's Checkpoint objects; None when this user may not list them."""
        try:
            listed = cast(
                dict[str, Any],
                self.api.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, "checkpoints", label_selector=f"belay.dev/session={name}"
                ),
            )
        except ApiException as error:
            if error.status == 403:
                return None
            raise CommandError(
                f"cannot list the checkpoints of {name}: {error.status} {error.reason}"
            ) from None
        return [_checkpoint(item) for item in listed.get("items", [])]

    def sessions(self, namespace: str | None, selector: str) -> tuple[list[dict[str, Any]], str]:
        """The AgentSessions (of one namespace, or of all with None) and the list's resourceVersion."""
        try:
            if namespace is None:
                listed = self.api.list_cluster_custom_object(
                    GROUP, VERSION, "agentsessions", label_selector=selector
                )
            else:
                listed = self.api.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, "agentsessions", label_selector=selector
                )
        except ApiException as error:
            where = "every namespace" if namespace is None else f"namespace {namespace!r}"
            raise CommandError(
                f"cannot list AgentSessions in {where}: {error.status} {error.reason}"
            ) from None
        listed = cast(dict[str, Any], listed)
        return list(listed.get("items", [])), str(listed.get("metadata", {}).get("resourceVersion", ""))

    def update_spec(
        self, namespace: str, name: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> dict[str, Any] | None:
        """Read the session, let `change(session)` give the spec patch (None: nothing to do), apply
        it as a compare-and-swap on the resourceVersion; a concurrent edit is read again and
        retried. Returns the session the patch was made against, or None when nothing was to do."""
        for _ in range(CONFLICT_RETRIES):
            session = self.raw(namespace, name)
            spec_patch = change(session)
            if spec_patch is None:
                return None
            patch = {
                "metadata": {"resourceVersion": session["metadata"]["resourceVersion"]},
                "spec": spec_patch,
            }
            try:
                self.api.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, "agentsessions", name, patch, field_manager=self.field_manager
                )
            except ApiException as error:
                if error.status == 409:
                    continue
                raise CommandError(f"cannot update {name}: {error.status} {error.reason}") from None
            return session
        raise CommandError(f"{name} kept changing; try again")

    def annotate(self, namespace: str, name: str, annotations: dict[str, str], asking: str) -> None:
        """Ask the operator something through an annotation on the session."""
        patch = {"metadata": {"annotations": annotations}}
        try:
            self.api.patch_namespaced_custom_object(GROUP, VERSION, namespace, "agentsessions", name, patch)
        except ApiException as error:
            if error.status == 404:
                raise CommandError(f"no AgentSession {name!r} in namespace {namespace!r}") from None
            raise CommandError(f"cannot ask for {asking} of {name}: {error.status} {reason(error)}") from None

    def await_status(
        self,
        namespace: str,
        name: str,
        answered: Callable[[dict[str, Any]], dict[str, Any] | None],
        timeout_s: float,
    ) -> dict[str, Any] | None:
        """Watch one session until `answered(status)` gives something; None when the time is up."""
        watcher = kube_watch.Watch()
        try:
            for change in watcher.stream(
                self.api.list_namespaced_custom_object,
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
            raise CommandError(f"cannot watch {name}: {error.status} {reason(error)}") from None
        return None


def typed(raw: dict[str, Any]) -> AgentSession:
    """An AgentSession read from the apiserver, as the API models read it."""
    name = (raw.get("metadata") or {}).get("name", "?")
    try:
        return parse_manifest(raw, source=f"agentsession/{name}")
    except ManifestError as error:
        raise CommandError(
            f"cannot read agentsession/{name} as this kubectl-belay reads it: {error}"
        ) from None


def _moment(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _checkpoint(item: dict[str, Any]) -> CheckpointObject:
    spec = item["spec"]
    return CheckpointObject(
        checkpoint_id=spec["checkpointId"],
        subagent=spec.get("subagent") or "",
        seq=int(spec["seq"]),
        verified=bool(spec["verified"]),
        created=_moment(item["metadata"].get("creationTimestamp")),
    )


def reason(error: ApiException) -> str:
    """The apiserver's own message (a validation rule's, say), else the HTTP reason."""
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except (ValueError, AttributeError):
        return str(error.reason)


def fetch(location: str, sha256: str, what: str, size: int | None = None) -> bytes:
    """Bytes the status names by their address in the session's artifact store, read with this
    user's own access: an S3 object with the credentials of this shell's environment (the AWS
    SDK's usual ones), a file where this machine reaches it. The operator never publishes a URL
    that carries its own access. Checked against their recorded hash (and size, where the status
    records one)."""
    parts = urllib.parse.urlsplit(location)
    limit = size + 1 if size is not None else -1
    if parts.scheme == "s3":
        data = _read_s3(parts.netloc, parts.path.lstrip("/"), limit, what)
    elif parts.scheme == "file":
        try:
            with Path(urllib.parse.unquote(parts.path)).open("rb") as handle:
                data = handle.read(limit)
        except OSError as error:
            raise CommandError(
                f"cannot read {what} at {location}: {error.strerror or error}; the artifact store "
                "is a directory of the operator's machine, which this one does not reach"
            ) from None
    else:
        raise CommandError(f"{what} are at {location or 'no address'}, which is no s3:// or file:// address")
    if (size is not None and len(data) != size) or hashlib.sha256(data).hexdigest() != sha256:
        raise CommandError(f"{what} as fetched do not match their recorded sha256 {sha256}; nothing written")
    return data


def _read_s3(bucket: str, key: str, limit: int, what: str) -> bytes:
    import botocore.exceptions

    from belay.stores.s3 import make_client

    environment = os.environ
    endpoint = environment.get("AWS_ENDPOINT_URL_S3") or environment.get("AWS_ENDPOINT_URL")
    region = environment.get("AWS_REGION") or environment.get("AWS_DEFAULT_REGION") or "us-east-1"
    s3 = make_client(endpoint, None, None, region)
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"]
        try:
            return bytes(body.read(limit if limit >= 0 else None))
        finally:
            body.close()
    except botocore.exceptions.NoCredentialsError:
        raise CommandError(
            f"cannot read {what} from s3://{bucket}/{key}: no AWS credentials in this environment; "
            "kubectl belay reads artifacts with your own access to the session's bucket"
        ) from None
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as error:
        raise CommandError(f"cannot read {what} from s3://{bucket}/{key}: {error}") from None
