"""docs/kubeflow.md's migration table is complete and true: every field of the served Kubeflow
CRDs has a row, and each pod template field's verdict there (kept, refused, dropped, or kept only
in namespaces of a looser Pod Security level) is what the kubeflow controller's conversion and the
trainer's override rules do with it at each level."""

import re
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainerop_common.pod_security import BASELINE, LEVELS, RESTRICTED
from trainerop_kubeflow import convert
from trainerop_trainer import overrides

REPO = Path(__file__).resolve().parents[2]
CRDS = sorted((REPO / "deploy" / "components" / "kubeflow" / "crds").glob("kubeflow.org_*.yaml"))
SECTION = (REPO / "docs" / "kubeflow.md").read_text().split("## Migrating: every field of a v1 job", 1)[1]
SECTION = SECTION.split("\n## ", 1)[0]
Row = tuple[str, str]  # the first cell (the fields) and the second (what happens here)


def table(heading: str) -> list[Row]:
    """The rows of the section's table whose first column is ``heading``."""
    block = SECTION.split(f"| {heading} |", 1)[1].split("\n\n", 1)[0]
    cells = [[c.strip() for c in line.strip("|").split(" | ")] for line in block.splitlines()[2:]]
    return [(c[0], c[1]) for c in cells]


def named(rows: list[Row], field: str) -> list[str]:
    """What the rows that name ``field`` (in backquotes, alone or with a value) say happens."""
    return [here for fields, here in rows if re.search(f"`{re.escape(field)}[`:]", fields)]


@cache
def spec_schema(crd: Path) -> dict[str, Any]:
    version = yaml.load(crd.read_text(), Loader=yaml.CSafeLoader)["spec"]["versions"][0]
    spec: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec


def job_fields(schema: Mapping[str, Any], path: str = "") -> Iterator[str]:
    """Every field of a job's spec that holds a value (objects by their fields), down to its replica
    specs' fields by their own names (not into the template, not into lists' items)."""
    for name, sub in (schema.get("properties") or {}).items():
        if name.endswith("ReplicaSpecs"):
            yield f"{path}{name}"
            yield from (field for field in sub["additionalProperties"]["properties"])
        elif "properties" in sub:
            yield from job_fields(sub, f"{path}{name}.")
        else:
            yield f"{path}{name}"


def template(crd: Path) -> dict[str, Any]:
    specs = next(s for n, s in spec_schema(crd)["properties"].items() if n.endswith("ReplicaSpecs"))
    found: dict[str, Any] = specs["additionalProperties"]["properties"]["template"]["properties"]
    return found


# What a field's verdicts at the three Pod Security levels (restricted, baseline, privileged) are
# called in the table: where a looser namespace keeps what "restricted" refuses, the row says so.
PHRASES = {
    ("kept", "kept", "kept"): "kept",
    ("dropped", "dropped", "dropped"): "dropped",
    ("refused", "refused", "refused"): "refused",
    ("refused", "kept", "kept"): "kept in `baseline` and `privileged` namespaces",
    ("refused", "refused", "kept"): "kept in `privileged` namespaces",
}


def verdict_at(fragment: dict[str, Any], field: str, level: str) -> str:
    converted = convert.override(fragment)
    if overrides.fragment_problems(converted, "spec.podTemplateOverrides.worker", level):
        return "refused"
    return "kept" if field in keys(converted) else "dropped"


def verdict(fragment: dict[str, Any], field: str) -> str:
    """What happens to ``field`` of a replica spec's ``fragment`` at each Pod Security level of the
    job's namespace: refused by the trainer's webhook, dropped by the conversion, or kept."""
    return PHRASES[tuple(verdict_at(fragment, field, level) for level in LEVELS)]  # type: ignore[index]


def keys(value: Any) -> set[str]:
    """Every key of ``value``'s mappings, at any depth."""
    if isinstance(value, Mapping):
        return set(value) | {k for v in value.values() for k in keys(v)}
    return {k for v in value for k in keys(v)} if isinstance(value, list) else set()


@pytest.mark.parametrize("crd", CRDS, ids=lambda c: c.name)
def test_every_job_field_has_a_row(crd: Path) -> None:
    firsts = [fields for fields, _ in table("Job field")]
    for field in job_fields(spec_schema(crd)):
        parent, _, leaf = field.rpartition(".")
        whole = any(f"`{field}`" in cell for cell in firsts)
        in_parents_row = any(f"`{parent}`" in cell and f"`{leaf}`" in cell for cell in firsts)
        assert whole or in_parents_row, f"{crd.name}: {field} has no row in docs/kubeflow.md's migration table"


def test_every_pod_template_field_has_the_verdict_the_rules_give() -> None:
    rows, pod = table("Template field"), template(CRDS[0])
    for field in pod["metadata"]["properties"]:
        expected = verdict({"metadata": {field: None}}, field)
        assert any(here.startswith(expected) for here in named(rows, f"metadata.{field}")), f"metadata.{field}"
    for field in pod["spec"]["properties"]:
        expected = verdict({"spec": {field: None}}, field)
        assert any(here.startswith(expected) for here in named(rows, field)), (
            f"{field}: {expected} ({named(rows, field)})"
        )
    for kind in pod["spec"]["properties"]["volumes"]["items"]["properties"]:
        if kind != "name":
            expected = verdict({"spec": {"volumes": [{"name": "v", kind: {}}]}}, kind)
            assert [h[: len(expected)] for h in named(rows, kind)] == [expected], f"volume {kind}"


@pytest.mark.parametrize(
    ("heading", "schema_path", "rules"),
    [
        ("Template field", ("spec", "securityContext"), lambda level: overrides.RULES[level].pod),
        ("Container field", ("spec", "containers", "securityContext"), lambda level: overrides.RULES[level].container),
    ],
)
def test_every_security_context_field_is_kept_only_at_the_levels_that_allow_it(
    heading: str, schema_path: tuple[str, ...], rules: Callable[[str], Mapping[str, Any]]
) -> None:
    schema = template(CRDS[0])["spec"]["properties"][schema_path[1]]
    if len(schema_path) == 3:
        schema = schema["items"]["properties"][schema_path[2]]
    rows = [(fields, here) for fields, here in table(heading) if "securityContext" in fields]
    for field in schema["properties"]:
        said = named(rows, field)
        loosest = next((level for level in LEVELS if field in rules(level)), None)
        expected = {RESTRICTED: "kept", BASELINE: PHRASES["refused", "kept", "kept"]}.get(
            loosest or "", PHRASES["refused", "refused", "kept"] if loosest else "refused"
        )
        assert any(here.startswith(expected) for here in said), f"securityContext.{field}: {expected} ({said})"
        assert loosest or not any(here.startswith("kept") for here in said), f"securityContext.{field}: {said}"


def test_every_container_field_has_the_verdict_the_rules_give() -> None:
    rows = table("Container field")
    container = template(CRDS[0])["spec"]["properties"]["containers"]["items"]["properties"]
    for field in container:
        expected = verdict({"spec": {"containers": [{"name": "pytorch", field: None}]}}, field)
        assert any(here.startswith(expected) for here in named(rows, field)), f"{field}: {named(rows, field)}"


def test_the_table_names_no_field_the_crds_do_not_have() -> None:
    known = {f for crd in CRDS for f in job_fields(spec_schema(crd))}
    known |= {f.rsplit(".", 1)[0] for f in known}  # the objects that hold them
    pod = template(CRDS[0])
    known |= {f"metadata.{f}" for f in pod["metadata"]["properties"]} | set(pod["spec"]["properties"])
    known |= set(pod["spec"]["properties"]["volumes"]["items"]["properties"])
    known |= set(pod["spec"]["properties"]["securityContext"]["properties"])
    container = pod["spec"]["properties"]["containers"]["items"]["properties"]
    known |= set(container) | set(container["securityContext"]["properties"])
    known |= {f.rpartition(".")[2] for f in known}
    for heading in ("Job field", "Template field", "Container field"):
        for fields, _ in table(heading):
            for field in re.findall(r"`([a-z][A-Za-z.]*)[`:]", fields):
                assert field in known, f"{heading} row names {field}, which no CRD has"
