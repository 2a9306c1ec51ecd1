"""Generate ``deploy/crds/*.yaml`` from the pydantic models (the one source of truth).

``python -m trainerop_common.crdgen deploy/crds`` writes the files (and Kubeflow v1's jobs' CRDs
to deploy/components/kubeflow/crds);
``--check`` exits non-zero and names the stale files when they differ from the models.
"""

import argparse
import functools
import inspect
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .api import KINDS, KUBEFLOW_KINDS, KindInfo
from .api.kubeflow import POD_TEMPLATE_MARK
from .names import PART_OF

# JSON-schema keywords a structural OpenAPI v3 schema may keep as they are.
_KEEP = {
    "description",
    "type",
    "format",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "default",
    "nullable",
}


# The schema extensions the API server accepts in a CRD.
CRD_EXTENSIONS = frozenset(
    {
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-validations",
    }
)


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Inline ``$ref``s and collapse ``Optional`` (``anyOf [X, null]``) into X."""
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        node = _over(_resolve(target, defs), node)
    if "allOf" in node and len(node["allOf"]) == 1:
        node = _over(_resolve(node.pop("allOf")[0], defs), node)
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express a union of {options} in a structural schema")
        node = _over(_resolve(options[0], defs), {k: v for k, v in node.items() if k != "default"})
    return node


def _over(model: dict[str, Any], field: dict[str, Any]) -> dict[str, Any]:
    """A field's schema over its model's: the field's keys win, but the rules of both hold (a
    model's CEL rules are not dropped by a field's own, such as an immutability rule)."""
    rules = [*model.get("x-kubernetes-validations", ()), *field.get("x-kubernetes-validations", ())]
    return {**model, **field, **({"x-kubernetes-validations": rules} if rules else {})}


@functools.cache
def pod_template_schema() -> dict[str, Any]:
    """corev1.PodTemplateSpec's structural schema, as hack/pod-template-schema.py wrote it."""
    text = resources.files("trainerop_common.api").joinpath("pod_template_schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Turn one pydantic JSON-schema node into a Kubernetes structural schema node."""
    node = _resolve(node, defs)
    if node.get(POD_TEMPLATE_MARK):
        return {**pod_template_schema(), **({"description": node["description"]} if "description" in node else {})}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _KEEP or key.startswith("x-kubernetes-"):
            out[key] = value
        elif key == "const":
            out["enum"] = [value]
        elif key == "anyOf":  # int-or-string keeps its two branches
            out["anyOf"] = value
    if out.get("default", 0) is None:
        del out["default"]
    if "properties" in node:
        out["type"] = "object"
        out["properties"] = {k: structural(v, defs) for k, v in node["properties"].items()}
    additional = node.get("additionalProperties")
    if isinstance(additional, dict) and additional:
        out["type"] = "object"
        out["additionalProperties"] = structural(additional, defs)
    elif node.get("type") == "object" and "properties" not in node:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "items" in node:
        out["items"] = structural(node["items"], defs)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def without_defaults(node: Any) -> Any:
    """Status carries no API-server defaults: controllers compare what they wrote with what
    they read, and a defaulted field would make every comparison differ."""
    if isinstance(node, dict):
        return {k: without_defaults(v) for k, v in node.items() if k != "default"}
    if isinstance(node, list):
        return [without_defaults(v) for v in node]
    return node


# metav1.TypeMeta's descriptions, as controller-gen and the built-in kinds write them (the API server
# refuses a CRD whose schema says anything of metadata but its type).
TYPE_META_DESCRIPTIONS = {
    "apiVersion": "APIVersion defines the versioned schema of this representation of an object. "
    "Servers should convert recognized schemas to the latest internal value, and "
    "may reject unrecognized values. "
    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
    "kind": "Kind is a string value representing the REST resource this object represents. "
    "Servers may infer this from the endpoint the client submits requests to. "
    "Cannot be updated. "
    "In CamelCase. "
    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
}


def kind_description(info: KindInfo) -> str:
    """The kind's description: the first paragraph of its model's docstring, on one line."""
    doc = inspect.cleandoc(info.model.__doc__ or "") or info.kind
    return " ".join(doc.split("\n\n", 1)[0].split())


def object_schema(info: KindInfo) -> dict[str, Any]:
    raw = info.model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    body = structural(raw, defs)
    props = dict(body.get("properties", {}))
    if "status" in props:
        props["status"] = without_defaults(props["status"])
    schema: dict[str, Any] = {
        "type": "object",
        "description": kind_description(info),
        "properties": {
            "apiVersion": {"type": "string", "description": TYPE_META_DESCRIPTIONS["apiVersion"]},
            "kind": {"type": "string", "description": TYPE_META_DESCRIPTIONS["kind"]},
            "metadata": {"type": "object"},
            **props,
        },
    }
    if "required" in body:
        schema["required"] = body["required"]
    if info.root_rules:
        schema["x-kubernetes-validations"] = [dict(r) for r in info.root_rules]
    return schema


def crd(info: KindInfo) -> dict[str, Any]:
    subresources: dict[str, Any] = {}
    if info.has_status:
        subresources["status"] = {}
    if info.scale:
        subresources["scale"] = dict(info.scale)
    schema = object_schema(info)
    version: dict[str, Any] = {
        "served": True,
        "schema": {"openAPIV3Schema": schema},
        "additionalPrinterColumns": [
            {
                "name": c.name,
                "type": c.type,
                "jsonPath": c.json_path,
                **({"priority": c.priority} if c.priority else {}),
                **({"description": c.description} if c.description else {}),
            }
            for c in info.columns
        ],
    }
    if subresources:
        version["subresources"] = subresources
    # Every version has the same schema: the API server converts between them by apiVersion alone.
    versions = [{"name": v, **version, "storage": v == info.storage} for v in info.served]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": info.crd_name,
            "labels": dict(PART_OF),
        },
        "spec": {
            "group": info.group,
            "scope": info.scope,
            "names": {
                "kind": info.kind,
                "listKind": f"{info.kind}List",
                "plural": info.plural,
                "singular": info.singular,
                **({"shortNames": list(info.short_names)} if info.short_names else {}),
                **({"categories": list(info.categories)} if info.categories else {}),
            },
            "versions": versions,
        },
    }


class _Dumper(yaml.SafeDumper):
    """Writes repeated sub-schemas in full: CRDs with YAML anchors are hard to read."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=100)


HEADER = "# Generated by `python -m trainerop_common.crdgen` from libs/common; do not edit.\n"


# Where the CRDs go, relative to deploy/crds: the operator's own, and Kubeflow v1's jobs, which
# only the kubeflow component installs (a cluster may have upstream's own).
KIND_SETS: dict[str, tuple[KindInfo, ...]] = {".": KINDS, "../components/kubeflow/crds": KUBEFLOW_KINDS}


def render(kinds: tuple[KindInfo, ...] = KINDS) -> dict[str, str]:
    """File name -> content for every CRD plus the kustomization that lists them."""
    files = {f"{info.group}_{info.plural}.yaml": HEADER + dump(crd(info)) for info in kinds}
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": sorted(files),
    }
    files["kustomization.yaml"] = HEADER + dump(kustomization)
    return files


def stale_files(out: Path, kinds: tuple[KindInfo, ...] = KINDS) -> list[str]:
    """Names of files in ``out`` that differ from the models (missing or extra ones too)."""
    wanted = render(kinds)
    present = {p.name for p in out.glob("*.yaml")} if out.is_dir() else set()
    stale = [n for n, text in wanted.items() if not (out / n).is_file() or (out / n).read_text() != text]
    return sorted(stale + sorted(present - set(wanted)))


def write(out: Path, kinds: tuple[KindInfo, ...] = KINDS) -> int:
    out.mkdir(parents=True, exist_ok=True)
    wanted = render(kinds)
    for name, text in wanted.items():
        (out / name).write_text(text)
    for path in out.glob("*.yaml"):
        if path.name not in wanted:
            path.unlink()
    return len(wanted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out", type=Path, nargs="?", default=Path("deploy/crds"))
    parser.add_argument("--check", action="store_true", help="fail if the files are stale")
    args = parser.parse_args(argv)
    targets = {args.out / relative: kinds for relative, kinds in KIND_SETS.items()}
    if args.check:
        stale = [f"{out.resolve()}/{name}" for out, kinds in targets.items() for name in stale_files(out, kinds)]
        if stale:
            print(
                f"CRDs are stale ({', '.join(stale)}); run: python -m trainerop_common.crdgen {args.out}",
                file=sys.stderr,
            )
            return 1
        return 0
    for out, kinds in targets.items():
        print(f"wrote {write(out, kinds)} files to {out.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
