"""``TrainerClient``: Trainers from Python — submit one (from an image, or a function whose source
travels to the pods), follow it to the end with a progress bar, read its logs, checkpoints,
Events and audit trail, suspend, resume, scale, delete. Talks to the API server only."""

import builtins
import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

import httpx2
from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.core.exceptions import ApiError, ConfigError
from lightkube.resources.core_v1 import Event, Pod
from lightkube.types import PatchType

from .display import ProgressBars
from .errors import TrainerClientError, no_cluster, refused, unreachable
from .kinds import (
    AUDIT_TRAINER_LABEL,
    AUDITLOG,
    CHECKPOINT,
    CHECKPOINT_REQUESTED_ANNOTATION,
    TRAINER,
    TRAINER_NAME_LABEL,
    USER_REQUEST,
    save_request_id,
)
from .logs import follow_logs
from .manifest import function_program, trainer_manifest
from .progress import Snapshot
from .ranks import SERVE, Sink, run_everywhere

Obj = dict[str, Any]
FIELD_MANAGER = "trainer-client"
POLL_SECONDS = 2.0  # how often a followed Trainer is looked at


class TrainerClient:
    """Trainers of one namespace (``namespace``, else the kubeconfig context's, else ``default``);
    the cluster from ``kubeconfig`` (else $KUBECONFIG, ~/.kube/config or the pod's ServiceAccount)."""

    def __init__(
        self,
        namespace: str | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        output: TextIO | None = None,
    ) -> None:
        try:
            config = (KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()).get(context)
        except ConfigError as err:
            raise no_cluster(err) from err
        self.namespace = namespace or config.namespace or "default"
        self.server = config.cluster.server
        self._api = Client(config, namespace=self.namespace, field_manager=FIELD_MANAGER)
        self._output = output

    @contextlib.contextmanager
    def _asking(self, what: str) -> Iterator[None]:
        """API failures as what to do about them."""
        try:
            yield
        except ApiError as err:
            status = err.status
            raise refused(status.code or 0, status.reason or "", status.message or "", what, self.namespace) from err
        except (httpx2.TransportError, OSError) as err:
            raise unreachable(self.server, err) from err

    # -- submitting ------------------------------------------------------------------------------
    def create(self, manifest: Mapping[str, Any]) -> Obj:
        """Create a Trainer from its manifest (as `kubectl apply -f` would take it); the created object."""
        name = manifest.get("metadata", {}).get("name") or "(generated name)"
        with self._asking(f"create Trainer {name}"):
            created = self._api.create(TRAINER.from_dict(dict(manifest)), namespace=self.namespace)
        return dict(created.to_dict())

    def train(
        self,
        image: str,
        *,
        func: Callable[..., Any] | None = None,
        func_args: Mapping[str, Any] | None = None,
        command: Sequence[str] | None = None,
        args: Sequence[str] | None = None,
        name: str | None = None,
        workers: int = 1,
        epochs: int = 1,
        framework: str = "generic",
        env: Mapping[str, str] | None = None,
        resources: Mapping[str, Any] | None = None,
        spec: Mapping[str, Any] | None = None,
        follow: bool = True,
        timeout: float | None = None,
    ) -> Obj:
        """Create a Trainer of ``workers`` pods of ``image`` running ``command``/``args``, or
        ``func(**func_args)`` (a function defined with ``def`` that does its own imports). With
        ``follow`` (the default) show its progress until it ends and return it then; else return it
        as created. ``spec``: more of the Trainer's spec (``{"checkpoint": {...}}``)."""
        if func is not None:
            if command or args:
                raise TrainerClientError("train(): give func or command/args, not both")
            command, shipped = function_program(func, func_args)
            env = {**(env or {}), **shipped}
        manifest = trainer_manifest(
            image,
            name=name,
            epochs=epochs,
            workers=workers,
            framework=framework,
            command=command,
            args=args,
            env=env,
            resources=resources,
            extra=spec,
        )
        created = self.create(manifest)
        return self.wait(created["metadata"]["name"], timeout=timeout) if follow else created

    def interactive(
        self,
        image: str,
        *,
        name: str | None = None,
        workers: int = 1,
        framework: str = "generic",
        env: Mapping[str, str] | None = None,
        resources: Mapping[str, Any] | None = None,
        spec: Mapping[str, Any] | None = None,
        timeout: float = 600,
    ) -> Obj:
        """A Trainer whose ranks wait for code from a notebook (``%%trainer NAME``, or
        :meth:`run_cell`), each keeping its variables from cell to cell; returned once every pod
        runs. ``image`` must carry the training SDK (``trainerop_sdk.interactive``) and python3."""
        manifest = trainer_manifest(
            image,
            name=name,
            workers=workers,
            framework=framework,
            command=SERVE,
            env=env,
            resources=resources,
            extra=spec,
        )
        created = self.create(manifest)["metadata"]["name"]
        for trainer in self.updates(created, timeout):
            phase = Snapshot.of(trainer).phase
            if phase == "Running":
                return trainer
            if phase == "Failed":
                break
        now = Snapshot.of(self.get(created))
        raise TrainerClientError(
            f"interactive Trainer {created} is {now.phase} ({now.reason}: {now.message}), not Running; "
            f"kubectl trainer describe {created} -n {self.namespace}"
        )

    def run_cell(self, name: str, source: str, sink: Sink | None = None) -> dict[str, int]:
        """Run ``source`` on every running rank of the interactive Trainer ``name`` at once; each
        line goes to ``sink(rank, line)`` as it arrives (default: printed with its rank); each
        rank's exit code (0: it ran, 1: it raised, 2: the pod is not interactive)."""
        pods = [p for p in self.pods(name) if (p.get("status") or {}).get("phase") == "Running"]
        if not pods:
            raise TrainerClientError(
                f"Trainer {name} has no running pods: cells run on its ranks while it is Running "
                f"(kubectl trainer get {name} -n {self.namespace})"
            )
        with self._asking(f"run a cell on {name}"):
            return run_everywhere(self._api, self.namespace, name, pods, source, sink or _print_line)

    # -- reading ---------------------------------------------------------------------------------
    def get(self, name: str) -> Obj:
        with self._asking(f"get Trainer {name}"):
            return dict(self._api.get(TRAINER, name, namespace=self.namespace).to_dict())

    def list(self) -> builtins.list[Obj]:
        with self._asking("list Trainers"):
            return sorted((dict(t.to_dict()) for t in self._api.list(TRAINER, namespace=self.namespace)), key=_name)

    def checkpoints(self, name: str) -> builtins.list[Obj]:
        """The run's Checkpoints, oldest step first."""
        with self._asking(f"list the Checkpoints of {name}"):
            found = self._api.list(CHECKPOINT, namespace=self.namespace, labels={TRAINER_NAME_LABEL: name})
            return sorted((dict(c.to_dict()) for c in found), key=lambda c: int(c["spec"].get("step", 0)))

    def events(self, name: str) -> builtins.list[Obj]:
        """The Events about the Trainer, oldest first."""
        with self._asking(f"list the Events of {name}"):
            found = self._api.list(
                Event, namespace=self.namespace, fields={"involvedObject.kind": "Trainer", "involvedObject.name": name}
            )
            return sorted((e.to_dict() for e in found), key=_event_time)

    def audit(self, name: str) -> builtins.list[Obj]:
        """The run's AuditLog trail, oldest first."""
        with self._asking(f"list the AuditLogs of {name}"):
            found = self._api.list(AUDITLOG, namespace=self.namespace, labels={AUDIT_TRAINER_LABEL: name})
            return sorted((dict(r.to_dict()) for r in found), key=_record_time)

    def pods(self, name: str) -> builtins.list[Obj]:
        with self._asking(f"list the pods of {name}"):
            found = self._api.list(Pod, namespace=self.namespace, labels={TRAINER_NAME_LABEL: name})
            return sorted((p.to_dict() for p in found), key=_name)

    def logs(self, name: str, follow: bool = False, tail: int | None = None) -> Iterator[str]:
        """Every rank's log lines, each prefixed with its pod's role and index (``[worker-1] ...``);
        with ``follow``, as they come until every pod's log ends."""
        pods = self.pods(name)
        if not pods:
            raise TrainerClientError(f"Trainer {name} has no pods now (kubectl trainer describe {name} says why)")
        with self._asking(f"read the logs of {name}"):
            yield from follow_logs(self._api, self.namespace, name, pods, follow, tail)

    # -- acting ----------------------------------------------------------------------------------
    def _patch(self, name: str, what: str, spec: Obj) -> Obj:
        with self._asking(f"{what} Trainer {name}"):
            patched = self._api.patch(
                TRAINER, name, {"spec": spec}, namespace=self.namespace, patch_type=PatchType.MERGE
            )
        return dict(patched.to_dict())

    def suspend(self, name: str) -> Obj:
        return self._patch(name, "suspend", {"runPolicy": {"suspend": True}})

    def resume(self, name: str) -> Obj:
        return self._patch(name, "resume", {"runPolicy": {"suspend": False}})

    def scale(self, name: str, workers: int) -> Obj:
        return self._patch(name, "scale", {"topology": {"workers": workers}})

    def request_checkpoint(self, name: str) -> str:
        """Ask every rank of the run to save a checkpoint now, at one step (docs/checkpoints.md);
        returns the time asked (RFC 3339), which the answer in status.checkpoint.saveRequest follows."""
        asked = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"metadata": {"annotations": {CHECKPOINT_REQUESTED_ANNOTATION: asked}}}
        with self._asking(f"request a checkpoint of Trainer {name}"):
            self._api.patch(TRAINER, name, body, namespace=self.namespace, patch_type=PatchType.MERGE)
        return asked

    def save_answers(self, name: str, asked: str, timeout: float | None = None) -> Iterator[Obj]:
        """The run's save request each time it changes, from the first that answers the request
        asked at ``asked`` (its own, by id; or a move's save asked since, which answers it too)
        until it is Committed or Missed; past ``timeout`` seconds, what to look at."""
        seen: Obj | None = None
        own = save_request_id(USER_REQUEST, asked)
        for trainer in self.updates(name, timeout):
            request = dict(((trainer.get("status") or {}).get("checkpoint") or {}).get("saveRequest") or {})
            ours = request.get("id") == own
            a_move = request.get("reason") != USER_REQUEST and str(request.get("requestedAt", "")) >= asked
            if not (ours or a_move) or request == seen:
                continue
            seen = request
            yield request
            if request.get("phase") != "Requested":
                return
        raise TrainerClientError(
            f"no answer to the checkpoint asked of {name} at {asked} after {timeout:.0f}s; "
            f"kubectl trainer describe {name} -n {self.namespace} shows its checkpoint status and Events"
        )

    def delete(self, name: str) -> None:
        with self._asking(f"delete Trainer {name}"):
            self._api.delete(TRAINER, name, namespace=self.namespace)

    # -- following -------------------------------------------------------------------------------
    def wait(self, name: str, timeout: float | None = None, show: bool = True) -> Obj:
        """Follow the Trainer until it has Succeeded or Failed (a bar of its progress with ``show``)
        and return it; past ``timeout`` seconds, say where it is and what to look at."""
        bars = ProgressBars(self._output) if show else None
        try:
            for trainer in self.updates(name, timeout):
                if bars is not None:
                    bars.show(Snapshot.of(trainer))
                if Snapshot.of(trainer).finished:
                    return trainer
        finally:
            if bars is not None:
                bars.close()
        now = Snapshot.of(self.get(name))
        raise TrainerClientError(
            f"Trainer {name} is still {now.phase} ({now.reason}: {now.message}) after {timeout:.0f}s; "
            f"kubectl trainer describe {name} -n {self.namespace} shows every concern's view"
        )

    def updates(self, name: str, timeout: float | None = None) -> Iterator[Obj]:
        """The Trainer as it is every POLL_SECONDS (the time left ticks between its changes), until
        ``timeout`` seconds have passed (None: for ever). A look at one object every two seconds
        costs the API server little, and unlike a watch it never expires."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            yield self.get(name)
            if deadline is not None and time.monotonic() >= deadline:
                return
            time.sleep(POLL_SECONDS if deadline is None else max(0.0, min(POLL_SECONDS, deadline - time.monotonic())))


def _print_line(rank: str, text: str) -> None:
    print(f"[{rank}] {text}", flush=True)


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def _event_time(event: Mapping[str, Any]) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp") or "")


def _record_time(record: Mapping[str, Any]) -> str:
    return str(record.get("spec", {}).get("stageTimestamp") or record["metadata"].get("creationTimestamp") or "")
