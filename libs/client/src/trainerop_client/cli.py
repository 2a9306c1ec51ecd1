"""``kubectl trainer`` (the executable ``kubectl-trainer``, also ``python -m trainerop_client``):
submit a Trainer and follow it, see what it is doing, its logs, checkpoints and audit trail, and
suspend, resume or scale it. A followed run's exit code is its result: 0 Succeeded, 1 Failed."""

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from .client import POLL_SECONDS, TrainerClient
from .describe import describe
from .display import ProgressBars
from .errors import TrainerClientError
from .progress import Snapshot
from .tables import audit_table, checkpoints_table, trainers_table

Command = Callable[[TrainerClient, argparse.Namespace], int]


def submit(client: TrainerClient, args: argparse.Namespace) -> int:
    docs = [d for d in yaml.safe_load_all(Path(args.filename).read_text()) if d]
    trainers = [d for d in docs if d.get("kind") == "Trainer"]
    if not trainers:
        raise TrainerClientError(f"{args.filename} has no Trainer (kind: Trainer): nothing to submit")
    names = [client.create(t)["metadata"]["name"] for t in trainers]
    for name in names:
        print(f"trainer.trainer.operator.kubeflow.org/{name} created")
    return 0 if args.detach else follow(client, names, args.timeout)


def follow(client: TrainerClient, names: Sequence[str], timeout: float | None) -> int:
    """Bars until every run has ended; 0 when all Succeeded, 1 otherwise."""
    if len(names) == 1:
        done = client.wait(names[0], timeout=timeout)
        return report([done])
    bars = ProgressBars()
    try:
        ended = follow_many(client, names, bars, timeout)
    finally:
        bars.close()
    return report(ended)


def follow_many(client: TrainerClient, names: Sequence[str], bars: ProgressBars, timeout: float | None) -> list[Any]:
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        runs = {t["metadata"]["name"]: t for t in client.list() if t["metadata"]["name"] in names}
        for run in runs.values():
            bars.show(Snapshot.of(run))
        if all(Snapshot.of(r).finished for r in runs.values()) and len(runs) == len(names):
            return list(runs.values())
        if deadline is not None and time.monotonic() > deadline:
            raise TrainerClientError(f"not all of {', '.join(names)} ended within {timeout:.0f}s")
        time.sleep(POLL_SECONDS)


def report(ended: Sequence[Any]) -> int:
    for run in ended:
        s = Snapshot.of(run)
        print(
            f"{s.name}: {s.phase} ({s.reason}: {s.message})", file=sys.stderr if s.phase != "Succeeded" else sys.stdout
        )
    return 0 if all(Snapshot.of(r).phase == "Succeeded" for r in ended) else 1


def get(client: TrainerClient, args: argparse.Namespace) -> int:
    trainers = [client.get(args.name)] if args.name else client.list()
    if not trainers:
        print(f"No Trainers in namespace {client.namespace}.", file=sys.stderr)
        return 0
    print(trainers_table(trainers, datetime.now(UTC)))
    return 0


def describe_command(client: TrainerClient, args: argparse.Namespace) -> int:
    print(describe(client.get(args.name), client.events(args.name)))
    return 0


def logs(client: TrainerClient, args: argparse.Namespace) -> int:
    for text in client.logs(args.name, follow=args.follow, tail=args.tail):
        print(text, flush=True)
    return 0


def watch(client: TrainerClient, args: argparse.Namespace) -> int:
    names = args.names or [t["metadata"]["name"] for t in client.list()]
    if not names:
        raise TrainerClientError(f"no Trainers in namespace {client.namespace} to watch")
    return follow(client, names, args.timeout)


def checkpoints(client: TrainerClient, args: argparse.Namespace) -> int:
    print(checkpoints_table(client.checkpoints(args.name)))
    return 0


def audit(client: TrainerClient, args: argparse.Namespace) -> int:
    print(audit_table(client.audit(args.name)))
    return 0


def suspend(client: TrainerClient, args: argparse.Namespace) -> int:
    client.suspend(args.name)
    print(f"trainer.trainer.operator.kubeflow.org/{args.name} suspended")
    return 0


def resume(client: TrainerClient, args: argparse.Namespace) -> int:
    client.resume(args.name)
    print(f"trainer.trainer.operator.kubeflow.org/{args.name} resumed")
    return 0


def scale(client: TrainerClient, args: argparse.Namespace) -> int:
    client.scale(args.name, args.workers)
    print(f"trainer.trainer.operator.kubeflow.org/{args.name} scaled to {args.workers} workers")
    return 0


def checkpoint(client: TrainerClient, args: argparse.Namespace) -> int:
    asked = client.request_checkpoint(args.name)
    print(f"trainer.trainer.operator.kubeflow.org/{args.name} checkpoint requested at {asked}")
    if not args.wait:
        print(f"(kubectl trainer describe {args.name} shows the answer: its checkpoint's saveRequest)")
        return 0
    request: dict[str, object] = {}
    for request in client.save_answers(args.name, asked, args.timeout):
        print(f"{request.get('phase')}: {request.get('message')}", flush=True)
    if request.get("phase") == "Committed":
        print(f"checkpoint {request.get('checkpoint')} committed at step {request.get('step')}")
        return 0
    return 1


def connection(default: object) -> argparse.ArgumentParser:
    """Where to connect: -n, --kubeconfig, --context."""
    options = argparse.ArgumentParser(add_help=False, argument_default=default)
    options.add_argument("-n", "--namespace", help="the namespace (default: the kubeconfig context's)")
    options.add_argument("--kubeconfig", help="the kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    options.add_argument("--context", help="the kubeconfig context (default: the current one)")
    return options


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kubectl trainer", description=__doc__, parents=[connection(None)])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # The same options after the command too (`kubectl trainer get -n team`), as kubectl takes them.
    anywhere = connection(argparse.SUPPRESS)

    def command(name: str, run: Command, help_: str, *, named: bool = True) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help_, description=help_, parents=[anywhere])
        c.set_defaults(run=run)
        if named:
            c.add_argument("name", help="the Trainer")
        return c

    s = command("submit", submit, "create the Trainers of a YAML file and follow them to the end", named=False)
    s.add_argument("-f", "--filename", required=True, help="a YAML file with one or more Trainers")
    s.add_argument("--detach", action="store_true", help="create and return, without following")
    s.add_argument("--timeout", type=float, help="stop following after so many seconds (exit 1)")
    g = command("get", get, "Trainers and how far each is", named=False)
    g.add_argument("name", nargs="?", help="one Trainer (default: all of the namespace)")
    command("describe", describe_command, "each concern's status, conditions and the latest Events")
    lg = command("logs", logs, "every rank's log, prefixed with the rank")
    lg.add_argument("-f", "--follow", action="store_true", help="go on as lines come")
    lg.add_argument("--tail", type=int, help="the last lines of each rank only")
    w = command("watch", watch, "progress bars until the runs end (exit code: 0 if all Succeeded)", named=False)
    w.add_argument("names", nargs="*", help="the Trainers (default: all of the namespace)")
    w.add_argument("--timeout", type=float, help="stop after so many seconds (exit 1)")
    command("checkpoints", checkpoints, "the run's checkpoints")
    cp = command("checkpoint", checkpoint, "ask every rank to save a checkpoint now, at one step")
    cp.add_argument("--wait", action="store_true", help="follow until it commits (exit 0) or is missed (exit 1)")
    cp.add_argument("--timeout", type=float, default=600.0, help="stop following after so many seconds (exit 1)")
    command("audit", audit, "the run's audit trail")
    command("suspend", suspend, "delete the run's pods and keep it (resume starts it again)")
    command("resume", resume, "start a suspended run again")
    sc = command("scale", scale, "set the number of workers")
    sc.add_argument("workers", type=int, help="the number of workers")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        client = TrainerClient(args.namespace, kubeconfig=args.kubeconfig, context=args.context)
        code: int = args.run(client, args)
        return code
    except TrainerClientError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
