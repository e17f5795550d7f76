"""CustomResourceDefinitions generated from the pydantic API models.

The models are the single source of truth; this module turns their JSON Schema into the
structural OpenAPI v3 schema the apiserver requires: references inlined, `Optional` as
`nullable`, enums and literals as string enums, no `additionalProperties: false` (unknown fields
are pruned by the apiserver, and rejected by `kubectl apply` with strict field validation),
conditions as a list-map keyed on `type`, and the models' CEL rules carried over as
`x-kubernetes-validations`.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel

from belay.api.agentsession import KIND, SESSION_NAME_MESSAGE, SESSION_NAME_PATTERN, AgentSessionSpec
from belay.api.checkpoint import CHECKPOINT_KIND, CheckpointSpec
from belay.api.status import UNOBSERVED, AgentSessionStatus

GROUP = "belay.dev"
VERSION = "v1alpha1"
CATEGORY = "belay"

# Keys of the pydantic schema that carry no meaning for the apiserver, or that a structural schema
# forbids. Defaults stay with the models (they apply them when parsing), except scalar ones, which
# the apiserver may as well show.
_DROPPED_KEYS = {"title", "additionalProperties", "$defs", "discriminator"}

# Lists whose items are identified by a key: server-side apply merges them per item, and the
# apiserver refuses two items with the same key.
_LIST_MAP_KEYS: dict[str, list[str]] = {"conditions": ["type"]}


class SchemaError(ValueError):
    """The model uses a construct the generator cannot express as a structural schema."""


def _resolve(ref: str, definitions: dict[str, Any]) -> dict[str, Any]:
    name = ref.removeprefix("#/$defs/")
    if name not in definitions:
        raise SchemaError(f"unresolved reference {ref}")
    return dict(definitions[name])


def _merge_any_of(options: list[dict[str, Any]], definitions: dict[str, Any]) -> dict[str, Any]:
    """`X | None` becomes X with nullable; a union of string-like options (an enum or free text,
    such as a reason) becomes a plain string."""
    nullable = any(option.get("type") == "null" for option in options)
    rest = [_structural(o, definitions) for o in options if o.get("type") != "null"]
    if len(rest) == 1:
        merged = dict(rest[0])
    elif all(o.get("type") == "string" for o in rest):
        merged = {"type": "string"}
    else:
        raise SchemaError(f"cannot express a union of {rest} structurally")
    if nullable:
        merged["nullable"] = True
    return merged


def _structural(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    node = dict(node)
    if "$ref" in node:
        # A field's own keys (description, default) override the referenced model's.
        target = _resolve(node.pop("$ref"), definitions)
        node = {**target, **node}
    if "anyOf" in node:
        options = node.pop("anyOf")
        merged = _merge_any_of(options, definitions)
        node = {**merged, **{k: v for k, v in node.items() if k in ("description", "default")}}
    if "const" in node:
        node["enum"] = [node.pop("const")]
    if "enum" in node and "type" not in node:
        node["type"] = "string"

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "default":
            if isinstance(value, dict | list) or value is None:
                continue
            out[key] = value
        elif key == "properties":
            out[key] = {name: _structural(child, definitions) for name, child in value.items()}
            for name, keys in _LIST_MAP_KEYS.items():
                if name in out[key]:
                    out[key][name]["x-kubernetes-list-type"] = "map"
                    out[key][name]["x-kubernetes-list-map-keys"] = keys
        elif key == "items":
            out[key] = _structural(value, definitions)
        else:
            out[key] = value
    if "prefixItems" in out:
        raise SchemaError("fixed-length tuples have no structural equivalent")
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" in node:
        extra = node["additionalProperties"]
        if isinstance(extra, dict):
            out["additionalProperties"] = _structural(extra, definitions)
    return out


def structural_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    definitions = schema.get("$defs", {})
    return _structural(schema, definitions)


def _root_schema(
    spec: type[BaseModel], status: type[BaseModel] | None, root_rules: list[dict[str, str]]
) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": structural_schema(spec),
    }
    if status is not None:
        properties["status"] = structural_schema(status)
        # The status before the operator's first pass: see belay.api.status.UNOBSERVED.
        properties["status"]["default"] = UNOBSERVED.model_dump(
            mode="json", by_alias=True, exclude_defaults=True
        )
    root: dict[str, Any] = {"type": "object", "required": ["spec"], "properties": properties}
    if root_rules:
        root["x-kubernetes-validations"] = root_rules
    return root


def _crd(
    *,
    kind: str,
    plural: str,
    short_names: list[str],
    schema: dict[str, Any],
    columns: list[dict[str, Any]],
    status_subresource: bool,
) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "additionalPrinterColumns": columns,
    }
    if status_subresource:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": [CATEGORY],
            },
            "versions": [version],
        },
    }


def agentsession_crd() -> dict[str, Any]:
    name_rule = {
        # Session names become label values and parts of pod names.
        "rule": f"self.metadata.name.matches('{SESSION_NAME_PATTERN}')",
        "message": SESSION_NAME_MESSAGE,
    }
    return _crd(
        kind=KIND,
        plural="agentsessions",
        short_names=["as", "agents"],
        schema=_root_schema(AgentSessionSpec, AgentSessionStatus, [name_rule]),
        columns=[
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Waiting On", "type": "string", "jsonPath": ".status.waitingOn"},
            {"name": "Step", "type": "string", "jsonPath": ".status.currentStep"},
            {"name": "Attempt", "type": "integer", "jsonPath": ".status.attempt", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        status_subresource=True,
    )


def checkpoint_crd() -> dict[str, Any]:
    return _crd(
        kind=CHECKPOINT_KIND,
        plural="checkpoints",
        short_names=["bcp"],
        schema=_root_schema(CheckpointSpec, None, []),
        columns=[
            {"name": "Session", "type": "string", "jsonPath": ".spec.session"},
            {"name": "Verified", "type": "boolean", "jsonPath": ".spec.verified"},
            {"name": "Covers", "type": "integer", "jsonPath": ".spec.coversSeq"},
            {"name": "Next Step", "type": "string", "jsonPath": ".spec.nextStep"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
        status_subresource=False,
    )


HEADER = "# Generated by `python -m belay.api.generate` from belay.api; do not edit.\n"


def render(crd: dict[str, Any]) -> str:
    return HEADER + yaml.safe_dump(crd, sort_keys=False, width=110)


def rendered_crds() -> dict[str, str]:
    """File name -> YAML text, for every CRD."""
    crds = [agentsession_crd(), checkpoint_crd()]
    return {f"{GROUP}_{crd['spec']['names']['plural']}.yaml": render(crd) for crd in crds}
