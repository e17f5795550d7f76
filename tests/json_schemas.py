"""JSON schemas for kubeconform, made from the two sources of truth this project validates
against: the generated CRDs (crds/*.yaml, from the pydantic models) and the OpenAPI definitions of
the pinned Kubernetes version (`api/openapi-spec/swagger.json` in the k8s.io/kubernetes module the
control plane is built from). No schema is downloaded.

    python -m tests.json_schemas --swagger SWAGGER --crds crds OUT_DIR MANIFEST...

prints the manifests that hold Kubernetes objects (the others, such as plans, are no concern of
kubeconform's), and writes one schema for each kind they hold, at
`OUT_DIR/<group or v1>/<kind>_<version>-strict.json` (kubeconform's `-schema-location
'OUT_DIR/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}{{ .StrictSuffix }}.json'`
with `-strict`). Strict: an object with declared properties accepts no other (a misspelled field
fails), unless the schema preserves unknown fields; a custom resource's `metadata` is checked as
Kubernetes' ObjectMeta. `nullable` becomes a null type,
`x-kubernetes-int-or-string` and Kubernetes' IntOrString either type, a Quantity a string or a
number, as the apiserver decodes them. Run by hack/kubeconform.sh (`make lint`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

Schema = dict[str, Any]
INT_OR_STRING: Schema = {"anyOf": [{"type": "integer"}, {"type": "string"}]}
QUANTITY: Schema = {"anyOf": [{"type": "string"}, {"type": "number"}]}
DEFINITIONS_REF = "#/definitions/"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def _strict(schema: Schema, preserves_unknown: bool) -> Schema:
    if schema.get("type") == "object" and "properties" in schema and not preserves_unknown:
        schema.setdefault("additionalProperties", False)
    return schema


def from_crd_schema(node: Schema) -> Schema:
    """A CRD's structural OpenAPI v3 schema as a strict JSON schema."""
    if node.get("x-kubernetes-int-or-string"):
        return dict(INT_OR_STRING)
    out: Schema = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key == "properties":
            out[key] = {name: from_crd_schema(child) for name, child in value.items()}
        elif key == "items" or (key == "additionalProperties" and isinstance(value, dict)):
            out[key] = from_crd_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [from_crd_schema(option) for option in value]
        elif key == "not":
            out[key] = from_crd_schema(value)
        else:
            out[key] = value
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return _strict(out, bool(node.get("x-kubernetes-preserve-unknown-fields")))


def from_openapi_definition(name: str, node: Schema) -> Schema:
    """A definition of Kubernetes' OpenAPI v2 document as a strict JSON schema."""
    if name.endswith(".IntOrString"):
        return dict(INT_OR_STRING)
    if name.endswith(".Quantity"):
        return dict(QUANTITY)
    return _openapi_node(node)


def _openapi_node(node: Schema) -> Schema:
    out: Schema = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-"):
            continue
        if key == "properties":
            out[key] = {name: _openapi_node(child) for name, child in value.items()}
        elif key == "items" or (key == "additionalProperties" and isinstance(value, dict)):
            out[key] = _openapi_node(value)
        else:
            out[key] = value
    return _strict(out, bool(node.get("x-kubernetes-preserve-unknown-fields")))


def _references(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(DEFINITIONS_REF):
            yield ref.removeprefix(DEFINITIONS_REF)
        for value in node.values():
            yield from _references(value)
    elif isinstance(node, list):
        for value in node:
            yield from _references(value)


def openapi_schema(definitions: dict[str, Schema], name: str) -> Schema:
    """One kind's schema, with every definition it refers to (transitively) beside it."""
    needed, queue = set(), [name]
    while queue:
        current = queue.pop()
        if current in needed:
            continue
        needed.add(current)
        queue.extend(_references(definitions[current]))
    schema = from_openapi_definition(name, definitions[name])
    schema["definitions"] = {n: from_openapi_definition(n, definitions[n]) for n in sorted(needed)}
    return schema


def with_object_meta(schema: Schema, definitions: dict[str, Schema]) -> Schema:
    """A CRD's schema with its `metadata` checked as Kubernetes' ObjectMeta (a CRD leaves it open)."""
    meta = openapi_schema(definitions, OBJECT_META)
    properties = {**schema["properties"], "metadata": {"$ref": DEFINITIONS_REF + OBJECT_META}}
    return {**schema, "properties": properties, "definitions": meta["definitions"]}


def group_version_kinds(definitions: dict[str, Schema]) -> dict[tuple[str, str, str], str]:
    """(group, version, kind) -> the name of its definition."""
    found = {}
    for name, node in definitions.items():
        for gvk in node.get("x-kubernetes-group-version-kind", []):
            found[(gvk["group"], gvk["version"], gvk["kind"])] = name
    return found


def crd_schemas(crd_files: Iterable[Path]) -> dict[tuple[str, str, str], Schema]:
    schemas = {}
    for path in crd_files:
        for crd in yaml.safe_load_all(path.read_text()):
            spec = crd["spec"]
            for version in spec["versions"]:
                key = (spec["group"], version["name"], spec["names"]["kind"])
                schemas[key] = from_crd_schema(version["schema"]["openAPIV3Schema"])
    return schemas


def kinds_in(path: Path) -> set[tuple[str, str, str]]:
    """(group, version, kind) of every Kubernetes object in the file (other YAML is not one)."""
    found = set()
    for document in yaml.safe_load_all(path.read_text()):
        if isinstance(document, dict) and "apiVersion" in document and "kind" in document:
            group, _, version = document["apiVersion"].rpartition("/")
            found.add((group, version, document["kind"]))
    return found


def schema_path(out_dir: Path, group: str, version: str, kind: str) -> Path:
    """Where kubeconform looks with the location template in the module's docstring (its Group is
    the apiVersion's group, or the version for the core group)."""
    return out_dir / (group or version) / f"{kind.lower()}_{version}-strict.json"


def write_schemas(swagger: Path, crd_files: list[Path], out_dir: Path, manifests: list[Path]) -> list[str]:
    """Writes a schema for each kind in the manifests; returns the kinds it has none for."""
    definitions = json.loads(swagger.read_text())["definitions"]
    builtin = group_version_kinds(definitions)
    custom = crd_schemas(crd_files)
    missing = []
    kinds = set().union(*(kinds_in(path) for path in manifests))
    for group, version, kind in sorted(kinds):
        if (group, version, kind) in custom:
            schema = with_object_meta(custom[(group, version, kind)], definitions)
        elif (group, version, kind) in builtin:
            schema = openapi_schema(definitions, builtin[(group, version, kind)])
        else:
            missing.append(f"{group}/{version}/{kind}".lstrip("/"))
            continue
        path = schema_path(out_dir, group, version, kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(schema, indent=1, sort_keys=True))
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.json_schemas", description=__doc__)
    parser.add_argument("--swagger", type=Path, required=True, help="Kubernetes' swagger.json")
    parser.add_argument("--crds", type=Path, required=True, help="the folder of generated CRDs")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("manifests", type=Path, nargs="+")
    args = parser.parse_args(argv)
    missing = write_schemas(args.swagger, sorted(args.crds.glob("*.yaml")), args.out_dir, args.manifests)
    for kind in missing:
        print(f"no schema for {kind}", file=sys.stderr)
    for path in args.manifests:
        if kinds_in(path):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
