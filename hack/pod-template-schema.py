"""Write the structural schema of a corev1.PodTemplateSpec that the Kubeflow v1 jobs' CRDs embed
(libs/common/src/trainerop_common/api/pod_template_schema.json), from the OpenAPI v3 document of
the Kubernetes release the local cluster runs (api/openapi-spec/v3/api__v1_openapi.json of the
k8s.io/kubernetes module that hack/build-k8s.sh downloads).

    .venv/bin/python hack/pod-template-schema.py [--check]

It is what controller-gen embeds in upstream's CRDs, without the descriptions (`kubectl explain
pod.spec` has them): references inlined, int-or-string and quantities as a CRD writes them, the
embedded metadata reduced to what a template may carry, and only the extensions a CRD accepts.
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from trainerop_common.crdgen import CRD_EXTENSIONS

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "libs/common/src/trainerop_common/api/pod_template_schema.json"
KUBERNETES = "v1.34.4"  # testbed/cluster.py's K8S_VERSION
ROOT = "io.k8s.api.core.v1.PodTemplateSpec"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
DROPPED = {"description", "oneOf", "discriminator", "fields-to-discriminateBy"}
# A template's metadata, as controller-gen writes an embedded ObjectMeta.
TEMPLATE_METADATA = {
    "type": "object",
    "properties": {
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "name": {"type": "string"},
        "namespace": {"type": "string"},
    },
}


def openapi_document() -> Path:
    mod = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout.strip()
    path = Path(mod) / f"k8s.io/kubernetes@{KUBERNETES}/api/openapi-spec/v3/api__v1_openapi.json"
    if not path.exists():
        sys.exit(f"{path} is missing: run hack/build-k8s.sh first (it downloads the Kubernetes module)")
    return path


def special(name: str) -> dict[str, Any] | None:
    if name == INT_OR_STRING:
        return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    if name == QUANTITY:
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    if name == OBJECT_META:
        return TEMPLATE_METADATA
    return None


def inline(node: Any, schemas: dict[str, Any]) -> Any:
    """The node with every reference replaced by its (structural) definition."""
    if isinstance(node, list):
        return [inline(v, schemas) for v in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    refs = [node.pop("$ref")] if "$ref" in node else [r["$ref"] for r in node.pop("allOf", ())]
    for ref in refs:
        name = ref.rsplit("/", 1)[-1]
        own = {k: v for k, v in node.items() if k != "default"}
        node = {**(special(name) or inline(schemas[name], schemas)), **own}
    out = {}
    for key, value in node.items():
        if key in DROPPED or (key.startswith("x-kubernetes-") and key not in CRD_EXTENSIONS):
            continue
        out[key] = value if key in ("required", "enum", "default") else inline(value, schemas)
    if out.get("default") == {}:
        del out["default"]
    return out


def schema() -> dict[str, Any]:
    document = json.loads(openapi_document().read_text())
    out: dict[str, Any] = inline(document["components"]["schemas"][ROOT], document["components"]["schemas"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed schema differs")
    args = parser.parse_args()
    text = json.dumps(schema(), indent=1, sort_keys=True) + "\n"
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print("up to date" if same else f"{OUT} is stale: run hack/pod-template-schema.py")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text)} bytes, from Kubernetes {KUBERNETES})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
