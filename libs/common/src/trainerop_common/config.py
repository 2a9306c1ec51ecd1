"""Controller configuration from flags, with TRAINEROP_* environment variables as defaults.

Every flag is documented in docs/controllers.md and docs/trainer.md; a Kustomize component sets
the environment of its Deployment. The defaults live in one place: ControllerConfig.
"""

import argparse
import os
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

CONCERNS = ("profile", "quota", "checkpoint", "audit")
# The condition each gating concern owns; audit records but never gates.
GATE_CONDITIONS = {"profile": "ProfileResolved", "quota": "QuotaAdmitted", "checkpoint": "CheckpointReady"}


def _env(name: str, default: str) -> str:
    return os.environ.get(f"TRAINEROP_{name}", default)


def env_gates(environ: Mapping[str, str]) -> str:
    """Gates announced by Kustomize components: TRAINEROP_GATE_<CONCERN>=true, one per concern,
    so that components can be combined freely; TRAINEROP_GATES (comma-separated) adds to them."""
    named = [c for c in CONCERNS if environ.get(f"TRAINEROP_GATE_{c.upper()}", "").lower() == "true"]
    return ",".join([*named, environ.get("TRAINEROP_GATES", "")])


def _csv(value: str) -> tuple[str, ...]:
    return tuple(sorted({v.strip() for v in value.split(",") if v.strip()}))


@dataclass(frozen=True)
class ControllerConfig:
    controller: str
    namespaces: tuple[str, ...] = ()
    metrics_address: str = "0.0.0.0"
    metrics_port: int = 8080
    log_level: str = "INFO"
    qps: float = 20.0
    burst: int = 40
    workers: int = 0
    resync_seconds: float = 300.0
    peering: bool = False
    peering_priority: int = 0
    peering_lifetime: int = 60
    pod_name: str = ""
    gates: tuple[str, ...] = field(default_factory=tuple)
    init_image: str = "busybox:1.36"
    restart_backoff_seconds: float = 1.0
    restart_backoff_cap_seconds: float = 60.0
    node_lost_seconds: float = 40.0
    secret_recheck_seconds: float = 10.0
    webhook_address: str = "0.0.0.0"
    webhook_port: int = 0
    webhook_cert_file: str = "/etc/trainer-operator/webhook/tls.crt"
    webhook_key_file: str = "/etc/trainer-operator/webhook/tls.key"
    retention_days: float = 0.0
    retention_records: int = 0
    retention_interval_seconds: float = 300.0
    storage_pod_image: str = "trainer-operator:dev"

    @property
    def gate_conditions(self) -> tuple[str, ...]:
        return tuple(GATE_CONDITIONS[g] for g in self.gates if g in GATE_CONDITIONS)


def parse_args(controller: str, argv: Sequence[str] | None = None) -> ControllerConfig:
    defaults = ControllerConfig(controller)
    p = argparse.ArgumentParser(prog=f"trainerop-{controller}", description=f"Trainer Operator {controller} controller")

    def flag(name: str, help_: str, kind: Callable[[str], Any] = str, **extra: Any) -> None:
        """--name, defaulting to $TRAINEROP_NAME, else to ControllerConfig's default."""
        attr = name.replace("-", "_")
        default = kind(_env(attr.upper(), str(getattr(defaults, attr))))
        p.add_argument(f"--{name}", type=kind, default=default, help=help_, **extra)

    p.add_argument(
        "--namespace",
        action="append",
        default=None,
        help="namespace to watch (repeatable); default: all (env TRAINEROP_NAMESPACES, comma-separated)",
    )
    flag("metrics-address", "address of /metrics, /healthz and /readyz")
    flag("metrics-port", "port of /metrics, /healthz and /readyz (0 picks a free port)", int)
    flag("log-level", "log level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    flag("qps", "client-side API rate limit (requests a second)", float)
    flag("burst", "client-side API rate limit burst", int)
    flag("workers", "objects reconciled concurrently (0: no limit)", int)
    flag("resync-seconds", "every Trainer is reconciled at least this often", float)
    p.add_argument(
        "--peering",
        action=argparse.BooleanOptionalAction,
        default=_env("PEERING", "false").lower() == "true",
        help="coordinate replicas with kopf peering so only one is active",
    )
    p.add_argument(
        "--peering-priority",
        type=int,
        default=int(_env("PEERING_PRIORITY", "0")) or secrets.randbelow(1_000_000) + 1,
        help="the live replica with the highest priority works, the others pause (default: random)",
    )
    flag("peering-lifetime", "seconds without a heartbeat after which a replica is presumed dead", int)
    if controller == "trainer":
        p.add_argument(
            "--gates",
            default=env_gates(os.environ),
            help=f"deployed concerns whose condition gates pod creation, comma-separated: {','.join(CONCERNS)}",
        )
        flag("init-image", "image of the init container that waits for the rendezvous address (sh, nslookup)")
        flag("restart-backoff-seconds", "wait before a role's 2nd replacement in a row, doubling after", float)
        flag("restart-backoff-cap-seconds", "the longest wait before a replacement", float)
        flag("node-lost-seconds", "replace pods of a node not Ready this long (a deleted node: at once)", float)
    if controller == "profile":
        flag(
            "secret-recheck-seconds",
            "how long a Secret's existence is trusted; a missing one is looked for again after this long",
            float,
        )
    if controller == "checkpoint":
        flag(
            "storage-pod-image",
            "image of the pods that verify and delete checkpoints on a PersistentVolumeClaim "
            "(python -m trainerop_checkpoint.pvc): the operator's image, as the storage-pod admission policy allows",
        )
    if controller == "audit":
        flag("webhook-address", "address the audit webhook (HTTPS) listens on")
        flag("webhook-port", "port of the audit webhook that records users' requests (0: not served)", int)
        flag("webhook-cert-file", "the webhook's serving certificate (PEM); re-read when it changes")
        flag("webhook-key-file", "the webhook's private key (PEM)")
        flag("retention-days", "delete audit records older than this many days (0: keep)", float)
        flag("retention-records", "keep at most this many audit records per namespace (0: no limit)", int)
        flag("retention-interval-seconds", "how often retention runs", float)
    a = p.parse_args(argv)
    gates = _csv(getattr(a, "gates", ""))
    unknown = set(gates) - set(CONCERNS)
    if unknown:
        p.error(f"unknown gate(s) {sorted(unknown)}; choose from {', '.join(CONCERNS)}")
    if getattr(a, "retention_days", 0) < 0 or getattr(a, "retention_records", 0) < 0:
        p.error("--retention-days and --retention-records must be 0 (no limit) or more")
    if getattr(a, "retention_interval_seconds", 1) <= 0:
        p.error("--retention-interval-seconds must be more than 0")
    if a.qps <= 0 or a.burst < 1 or a.workers < 0:
        p.error("--qps must be > 0, --burst at least 1, --workers at least 0 (0: no limit)")
    derived = {"controller", "namespaces", "pod_name", "gates"}
    parsed = {k: v for k, v in vars(a).items() if k in {f.name for f in fields(ControllerConfig)} - derived}
    return replace(
        defaults,
        **parsed,
        namespaces=tuple(a.namespace) if a.namespace else _csv(_env("NAMESPACES", "")),
        pod_name=os.environ.get("POD_NAME", os.uname().nodename),
        gates=gates,
    )
