"""Which provider endpoint a managed executor talks to, from the SDKs' standard variables only.

- `*_BASE_URL` set: that server (any server that speaks the provider's API), with `*_API_KEY`.
- Only `*_API_KEY` set: the provider's own API.
- Neither: no provider is configured; `belay run` and `belay resume` use the provider's local
  stand-in (its remote agent following the manifest's `executor.plan`): a process of its own,
  found under the session's directory in the home (`belay.local.standin_process`).

In a cluster the harness pod's environment carries the variables from `executor.credentialsSecret`.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

from belay.executors.provider import Endpoint, endpoint_label


@dataclass(frozen=True)
class ProviderVariables:
    api_key: str
    base_url: str
    default_base_url: str
    provider: str
    standin_module: str
    # The model ids the local stand-in knows (those of the provider's family; its Models API
    # answers 404 for any other), read by the stand-in and by the check before a move to it.
    standin_models: str


PROVIDERS = {
    "openai-agents": ProviderVariables(
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "https://api.openai.com/v1",
        "the OpenAI API",
        "belay.executors.standins.openai_agents",
        r"^(gpt-|o[0-9]|codex-)",
    ),
    "anthropic-managed": ProviderVariables(
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "https://api.anthropic.com",
        "the Anthropic API",
        "belay.executors.standins.anthropic_managed",
        r"^claude-",
    ),
}
# A server named by `*_BASE_URL` may need no key; the SDKs insist on one.
NO_KEY = "belay-no-key"
STANDIN_KEY = "belay-local-standin"
STANDIN_TIMEOUT_S = 20.0


def configured_endpoint(executor_type: str, environ: Mapping[str, str]) -> Endpoint | None:
    """The endpoint the environment configures, or None when it configures none."""
    variables = PROVIDERS[executor_type]
    base_url = environ.get(variables.base_url)
    api_key = environ.get(variables.api_key)
    if base_url:
        return Endpoint(base_url, api_key or NO_KEY, endpoint_label(base_url, variables.base_url))
    if api_key:
        return Endpoint(None, api_key, endpoint_label(variables.default_base_url, variables.provider))
    return None


def default_endpoint(executor_type: str, environ: Mapping[str, str]) -> Endpoint:
    """What the environment configures; with nothing configured, the provider's API, where the SDK
    will ask for the key that is missing."""
    variables = PROVIDERS[executor_type]
    configured = configured_endpoint(executor_type, environ)
    return configured or Endpoint(label=endpoint_label(variables.default_base_url, variables.provider))


def standin_endpoint(base_url: str) -> Endpoint:
    """The local stand-in at `base_url`. A stand-in that stops answering mid-run must not hold each
    request for the SDK's default ten minutes: 20 s without a byte is a stand-in gone (its event
    streams send a keepalive every ten seconds), and the attempt ends as the provider unavailable
    once its tries are spent."""
    label = endpoint_label(base_url, "the local stand-in")
    return Endpoint(base_url, STANDIN_KEY, label, standin=True, timeout=STANDIN_TIMEOUT_S)


def standin_model_id(asked: str) -> str:
    """The model a stand-in reports, and the record names, for a session that asked for `asked`:
    its scripted plan decided, not that model."""
    return f"local stand-in (scripted plan, in place of {asked or 'the model asked for'})"


# The variables a self-hosted model executor reads (its SDK's own).
# A self-hosted model executor reads the same SDK variables as the managed executor of its provider.
SAME_PROVIDER = {"openai": "openai-agents", "anthropic": "anthropic-managed"}


def provider_type(executor_type: str) -> str:
    """The managed executor type whose provider (and variables) `executor_type` uses."""
    return SAME_PROVIDER.get(executor_type, executor_type)


def self_hosted_key(executor_type: str, base_url: str | None, environ: Mapping[str, str]) -> str | None:
    """The key a self-hosted model executor's SDK is given: its variable's when set; else, for a
    server named by `executor.baseURL` or the base URL variable (a local server often needs none),
    a placeholder, since the SDKs refuse to start without one; else None, and the SDK says what is
    missing."""
    variables = PROVIDERS[provider_type(executor_type)]
    if environ.get(variables.api_key):
        return environ[variables.api_key]
    return NO_KEY if base_url or environ.get(variables.base_url) else None


def not_configured(
    executor_type: str, plan: str | None, environ: Mapping[str, str], base_url: str | None = None
) -> str | None:
    """Why `executor_type` cannot run here (no provider configured and no local stand-in to stand
    in for it), or None when it can. `scripted` needs only its plan, which validation requires; a
    self-hosted model executor only its server, when `executor.baseURL` (`base_url`) names one."""
    if executor_type in PROVIDERS:
        variables = PROVIDERS[executor_type]
        if configured_endpoint(executor_type, environ) is not None or plan:
            return None
        return (
            f"{executor_type} is not configured here: set {variables.api_key} (or {variables.base_url} "
            "for another server that speaks its API), or give the session an executor.plan for the "
            "local stand-in"
        )
    keys = PROVIDERS.get(provider_type(executor_type))
    if keys is None or base_url or environ.get(keys.api_key) or environ.get(keys.base_url):
        return None
    return (
        f"{executor_type} is not configured here: set {keys.api_key} (or {keys.base_url} "
        "for another server that speaks its API)"
    )


def model_endpoint(
    executor_type: str, environ: Mapping[str, str], base_url: str | None = None
) -> Endpoint | None:
    """The provider endpoint the environment configures for a model executor, self-hosted
    (`openai`, `anthropic`: the same SDK variables; `executor.baseURL`, `base_url`, before them)
    or managed; None when it configures none."""
    managed = provider_type(executor_type)
    if managed not in PROVIDERS:
        return None
    if base_url and executor_type in SAME_PROVIDER:
        key = self_hosted_key(executor_type, base_url, environ)
        return Endpoint(base_url, key, endpoint_label(base_url, "executor.baseURL"))
    return configured_endpoint(managed, environ)


# How long `belay resume --executor` waits for the provider to say whether it knows the model.
MODEL_CHECK_TIMEOUT_S = 20.0
# The most of an answer of the Models API read (a server's list of every model it serves).
MAX_MODELS_ANSWER_BYTES = 4 * 1024 * 1024


def standin_model_refusal(executor_type: str, model: str) -> str | None:
    """Why the session's local stand-in would refuse `model` (what its Models API answers), asked
    of its rule here, so that a move to a stand-in not yet running does not wait for its start."""
    variables = PROVIDERS[executor_type]
    if re.match(variables.standin_models, model):
        return None
    return (
        f"the local stand-in for {variables.provider} does not know model {model!r} "
        f"(it knows ids matching {variables.standin_models})"
    )


@dataclass(frozen=True)
class ModelCheck:
    """What the provider said of a model: why it refuses it (None: it does not), and what could
    not be checked, in one line, when the provider could not say either way."""

    refusal: str | None = None
    unchecked: str | None = None


def model_refusal(executor_type: str, endpoint: Endpoint, model: str) -> str | None:
    """Why the provider at `endpoint` refuses `model`, or None (`check_model`)."""
    return check_model(executor_type, endpoint, model).refusal


def check_model(executor_type: str, endpoint: Endpoint, model: str) -> ModelCheck:
    """Whether the provider at `endpoint` knows `model`, asked of its Models API (`GET
    .../models/{id}`). Refused only when the provider says it does not know it (a 404 in its API's
    error shape); a server without that route (llama.cpp's `llama-server` has only the list) is
    asked for the list once, and the move goes on whatever it lists: a local server may serve any
    name. Unreachable, no key, any other answer: not refused either, and the attempt says itself
    what is wrong; a refusal here never rests on a guess. Plain HTTP, as both APIs document it:
    the provider's SDK takes seconds to import."""
    provider = provider_type(executor_type)
    openai = provider == "openai-agents"
    default = PROVIDERS[provider].default_base_url
    base = (endpoint.base_url or default).rstrip("/")
    models = f"{base}/models" if openai else f"{base}/v1/models"
    key = endpoint.api_key or NO_KEY
    headers = (
        {"Authorization": f"Bearer {key}"}
        if openai
        else {"x-api-key": key, "anthropic-version": "2023-06-01"}
    )
    status, body = _get(f"{models}/{quote(model, safe='')}", headers)
    if status != 404:
        return ModelCheck()
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict | str):  # the API itself answered: it does not know the model
        said = error.get("message", "") if isinstance(error, dict) else error
        return ModelCheck(
            refusal=f"{endpoint.label} does not know model {model!r} (404: {said or 'not found'})"
        )
    # No such route: the list, once.
    status, body = _get(models, headers)
    listed = body.get("data") if isinstance(body, dict) and status == 200 else None
    if not isinstance(listed, list):
        return ModelCheck(
            unchecked=f"could not check model {model!r}: {endpoint.label} has no Models API "
            f"(GET {models}/{{id}} and GET {models} answer {status if status == 404 else 'no list'})"
        )
    ids = [str(entry.get("id")) for entry in listed if isinstance(entry, dict)]
    if model in ids:
        return ModelCheck()
    shown = ", ".join(repr(i) for i in ids[:5]) + (", ..." if len(ids) > 5 else "")
    return ModelCheck(
        unchecked=f"could not check model {model!r}: {endpoint.label} has no GET {models}/{{id}} and "
        f"lists {shown or 'no model'}; it may still serve it"
    )


def _get(url: str, headers: Mapping[str, str]) -> tuple[int | None, object]:
    """The status and JSON body of a GET (None for the body when it is not JSON; no status when
    the server could not be asked)."""
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=dict(headers)), timeout=MODEL_CHECK_TIMEOUT_S
        ) as answer:
            return answer.status, _json(answer.read(MAX_MODELS_ANSWER_BYTES))
    except urllib.error.HTTPError as refused:
        return refused.code, _json(refused.read(MAX_MODELS_ANSWER_BYTES) or b"")
    except (OSError, ValueError):
        return None, None


def _json(data: bytes) -> object:
    try:
        return json.loads(data)
    except ValueError:
        return None
