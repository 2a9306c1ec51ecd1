"""``trainerop-kubeflow-convert -f job.yaml``: print the Trainer each Kubeflow v1 job of a
manifest becomes, for teams that move their manifests over (docs/kubeflow.md)."""

import argparse
import sys
from collections.abc import Iterable
from typing import Any, TextIO

import yaml

from trainerop_common.api.kubeflow import KUBEFLOW_API_VERSION

from .convert import problems, to_trainer
from .kinds import JOB_KINDS


def convert_all(documents: Iterable[Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The Trainers of the jobs among ``documents``, and what stops any of them, by job."""
    trainers, refused = [], []
    for doc in documents:
        if not isinstance(doc, dict):
            continue
        kind = JOB_KINDS.get(str(doc.get("kind")))
        if kind is None or doc.get("apiVersion") != KUBEFLOW_API_VERSION:
            refused.append(f"{doc.get('apiVersion')} {doc.get('kind')}: not a Kubeflow v1 job ({', '.join(JOB_KINDS)})")
            continue
        name = f"{kind.kind} {(doc.get('metadata') or {}).get('name')}"
        try:
            found = problems(kind, doc)
            trainer = to_trainer(kind, doc) if not found else {}
        except (AttributeError, KeyError, TypeError, ValueError) as err:  # not shaped as the CRD's schema says
            found = [
                f"not a valid {kind.kind} ({type(err).__name__}: {err}); kubectl apply --dry-run=server says where"
            ]
        if found:
            refused += [f"{name}: {p}" for p in found]
            continue
        trainer["metadata"] = {k: v for k, v in trainer["metadata"].items() if v is not None}
        trainers.append(trainer)
    return trainers, refused


def main(argv: list[str] | None = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    parser = argparse.ArgumentParser(prog="trainerop-kubeflow-convert", description=__doc__)
    parser.add_argument("-f", "--filename", required=True, help="a manifest of Kubeflow v1 jobs ('-': stdin)")
    args = parser.parse_args(argv)
    try:
        source = sys.stdin if args.filename == "-" else open(args.filename, encoding="utf-8")  # noqa: SIM115
        with source:
            documents = list(yaml.safe_load_all(source))
    except (OSError, yaml.YAMLError) as e:
        print(f"error: cannot read {args.filename}: {e}", file=err)
        return 2
    trainers, refused = convert_all(documents)
    for line in refused:
        print(f"error: {line}", file=err)
    if trainers:
        out.write(yaml.safe_dump_all(trainers, sort_keys=False))
    return 1 if refused else 0
