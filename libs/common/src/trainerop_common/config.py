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
# Controllers that serve admission webhooks (docs/admission.md); the audit one only observes.
WEBHOOK_SERVERS = ("trainer", "profile", "quota", "audit")
WEBHOOK_TLS = ("files", "self-signed")
NOTIFY_FORMATS = ("slack", "teams", "json")
NOTIFY_EVENTS = ("Failed", "Stalled", "Succeeded", "RestartStorm")
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
    webhook_tls: str = "files"
    webhook_service: str = ""
    operator_namespace: str = "trainer-operator-system"
    admission_node_fit: bool = True
    otlp_endpoint: str = ""
    notify_url_file: str = ""
    notify_format: str = "slack"
    notify_events: tuple[str, ...] = ("Failed", "RestartStorm", "Stalled", "Succeeded")
    notify_restart_storm_failures: int = 3
    notify_max_age_seconds: float = 3600.0
    trace_sample_ratio: float = 1.0
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
    flag(
        "otlp-endpoint",
        "export OpenTelemetry spans over OTLP/HTTP to this base URL (e.g. http://tempo:4318); empty: "
        "off unless OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set",
    )
    flag("trace-sample-ratio", "fraction of traces exported (0 to 1)", float)
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
    if controller in WEBHOOK_SERVERS:
        flag("webhook-address", "address the admission webhooks (HTTPS) listen on")
        flag("webhook-port", "port of the admission webhooks (0: not served)", int)
        flag("webhook-cert-file", "the webhooks' serving certificate (PEM); re-read when it changes")
        flag("webhook-key-file", "the webhooks' private key (PEM)")
        flag(
            "webhook-tls",
            "files: the certificate files are provided (cert-manager's Secret); self-signed: issue them "
            "from the CA in Secret trainer-operator-webhook-ca (created if missing), write them to the "
            "files above and put the CA into this controller's webhook configurations",
            choices=list(WEBHOOK_TLS),
        )
        flag(
            "webhook-service",
            "the webhooks' Service, named in self-signed certificates (default: trainer-operator-<controller>-webhook)",
        )
        flag("operator-namespace", "the namespace the operator runs in (its Service and the CA Secret)")
    if controller == "trainer":
        p.add_argument(
            "--admission-node-fit",
            action=argparse.BooleanOptionalAction,
            default=_env("ADMISSION_NODE_FIT", "true").lower() == "true",
            help="refuse a Trainer whose pods fit no node of the cluster "
            "(turn off where an autoscaler adds nodes on demand)",
        )
    if controller == "audit":
        flag("retention-days", "delete audit records older than this many days (0: keep)", float)
        flag("retention-records", "keep at most this many audit records per namespace (0: no limit)", int)
        flag("retention-interval-seconds", "how often retention runs", float)
        flag(
            "notify-url-file",
            "a file holding the URL of the webhook to notify of Trainer events (mount it from a Secret; "
            "re-read when it changes); empty: no notifications",
        )
        flag(
            "notify-format",
            "the webhook's payload: slack, teams (an Adaptive Card) or json",
            choices=list(NOTIFY_FORMATS),
        )
        p.add_argument(
            "--notify-events",
            default=_env("NOTIFY_EVENTS", ",".join(defaults.notify_events)),
            help=f"events to notify, comma-separated: {','.join(NOTIFY_EVENTS)}",
        )
        flag("notify-restart-storm-failures", "a role's failures in a row that make a restart storm", int)
        flag(
            "notify-max-age-seconds",
            "events older than this when first seen are not sent (a notifier turned on over old runs)",
            float,
        )
    a = p.parse_args(argv)
    gates = _csv(getattr(a, "gates", ""))
    unknown = set(gates) - set(CONCERNS)
    if unknown:
        p.error(f"unknown gate(s) {sorted(unknown)}; choose from {', '.join(CONCERNS)}")
    if getattr(a, "retention_days", 0) < 0 or getattr(a, "retention_records", 0) < 0:
        p.error("--retention-days and --retention-records must be 0 (no limit) or more")
    if getattr(a, "retention_interval_seconds", 1) <= 0:
        p.error("--retention-interval-seconds must be more than 0")
    events = _csv(getattr(a, "notify_events", ""))
    if set(events) - set(NOTIFY_EVENTS):
        p.error(
            f"unknown --notify-events {sorted(set(events) - set(NOTIFY_EVENTS))}; choose from {','.join(NOTIFY_EVENTS)}"
        )
    if getattr(a, "notify_restart_storm_failures", 1) < 1:
        p.error("--notify-restart-storm-failures must be at least 1")
    # choices= judges flags only; values from the environment are judged here
    for name, allowed in (("webhook_tls", WEBHOOK_TLS), ("notify_format", NOTIFY_FORMATS)):
        if hasattr(a, name) and getattr(a, name) not in allowed:
            p.error(f"--{name.replace('_', '-')} must be one of {', '.join(allowed)} (got {getattr(a, name)!r})")
    if not 0 <= a.trace_sample_ratio <= 1:
        p.error("--trace-sample-ratio must be between 0 and 1")
    if a.qps <= 0 or a.burst < 1 or a.workers < 0:
        p.error("--qps must be > 0, --burst at least 1, --workers at least 0 (0: no limit)")
    derived = {"controller", "namespaces", "pod_name", "gates", "webhook_service", "notify_events"}
    parsed = {k: v for k, v in vars(a).items() if k in {f.name for f in fields(ControllerConfig)} - derived}
    return replace(
        defaults,
        **parsed,
        namespaces=tuple(a.namespace) if a.namespace else _csv(_env("NAMESPACES", "")),
        pod_name=os.environ.get("POD_NAME", os.uname().nodename),
        gates=gates,
        webhook_service=getattr(a, "webhook_service", "") or f"trainer-operator-{controller}-webhook",
        notify_events=events or defaults.notify_events,
    )
