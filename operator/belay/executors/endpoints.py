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


def not_configured(executor_type: str, plan: str | None, environ: Mapping[str, str]) -> str | None:
    """Why `executor_type` cannot run here (no provider configured and no local stand-in to stand
    in for it), or None when it can. `scripted` needs only its plan, which validation requires."""
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
    if keys is None or environ.get(keys.api_key) or environ.get(keys.base_url):
        return None
    return (
        f"{executor_type} is not configured here: set {keys.api_key} (or {keys.base_url} "
        "for another server that speaks its API)"
    )


def model_endpoint(executor_type: str, environ: Mapping[str, str]) -> Endpoint | None:
    """The provider endpoint the environment configures for a model executor, self-hosted
    (`openai`, `anthropic`: the same SDK variables) or managed; None when it configures none."""
    managed = provider_type(executor_type)
    return configured_endpoint(managed, environ) if managed in PROVIDERS else None


# How long `belay resume --executor` waits for the provider to say whether it knows the model.
MODEL_CHECK_TIMEOUT_S = 20.0


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


def model_refusal(executor_type: str, endpoint: Endpoint, model: str) -> str | None:
    """Why the provider at `endpoint` refuses `model` (its Models API, `GET .../models/{id}`,
    answers 404), or None when it knows it, or when it could not be asked (unreachable, no key,
    any other answer): the attempt then says so itself, and a refusal here never rests on a
    guess. Plain HTTP, as both APIs document it: the provider's SDK takes seconds to import."""
    provider = provider_type(executor_type)
    openai = provider == "openai-agents"
    default = PROVIDERS[provider].default_base_url
    base = (endpoint.base_url or default).rstrip("/")
    url = f"{base}/models/{quote(model, safe='')}" if openai else f"{base}/v1/models/{quote(model, safe='')}"
    key = endpoint.api_key or NO_KEY
    headers = (
        {"Authorization": f"Bearer {key}"}
        if openai
        else {"x-api-key": key, "anthropic-version": "2023-06-01"}
    )
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=MODEL_CHECK_TIMEOUT_S
        ):
            return None
    except urllib.error.HTTPError as refused:
        if refused.code != 404:
            return None
        try:
            said = json.loads(refused.read() or b"{}").get("error", {}).get("message", "")
        except (ValueError, AttributeError):
            said = ""
        return f"{endpoint.label} does not know model {model!r} (404: {said or 'not found'})"
    except (OSError, ValueError):
        return None
    return None
