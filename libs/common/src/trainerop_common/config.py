"""Controller configuration from flags, with TRAINEROP_* environment variables as defaults.

Every flag is documented in docs/configuration.md; a Kustomize component sets the
environment of its Deployment.
"""

import argparse
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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

    @property
    def gate_conditions(self) -> tuple[str, ...]:
        return tuple(GATE_CONDITIONS[g] for g in self.gates if g in GATE_CONDITIONS)


def parse_args(controller: str, argv: Sequence[str] | None = None) -> ControllerConfig:
    p = argparse.ArgumentParser(prog=f"trainerop-{controller}", description=f"Trainer Operator {controller} controller")
    p.add_argument(
        "--namespace",
        action="append",
        default=None,
        help="namespace to watch (repeatable); default: all (env TRAINEROP_NAMESPACES, comma-separated)",
    )
    p.add_argument("--metrics-address", default=_env("METRICS_ADDRESS", "0.0.0.0"))
    p.add_argument(
        "--metrics-port",
        type=int,
        default=int(_env("METRICS_PORT", "8080")),
        help="port of /metrics, /healthz and /readyz (0 picks a free port)",
    )
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"), choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--qps", type=float, default=float(_env("QPS", "20")), help="client-side API rate limit")
    p.add_argument("--burst", type=int, default=int(_env("BURST", "40")))
    p.add_argument(
        "--workers", type=int, default=int(_env("WORKERS", "0")), help="objects reconciled concurrently (0: no limit)"
    )
    p.add_argument("--resync-seconds", type=float, default=float(_env("RESYNC_SECONDS", "300")))
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
    p.add_argument(
        "--peering-lifetime",
        type=int,
        default=int(_env("PEERING_LIFETIME", "60")),
        help="seconds without a heartbeat after which a replica is presumed dead",
    )
    if controller == "trainer":
        p.add_argument(
            "--gates",
            default=env_gates(os.environ),
            help=f"deployed concerns whose condition gates pod creation, comma-separated: {','.join(CONCERNS)}",
        )
        p.add_argument(
            "--init-image",
            default=_env("INIT_IMAGE", "busybox:1.36"),
            help="image of the init container that waits for the rendezvous address (needs sh and nslookup)",
        )
        p.add_argument(
            "--restart-backoff-seconds",
            type=float,
            default=float(_env("RESTART_BACKOFF_SECONDS", "1")),
            help="a role's first replacement is immediate, the next ones wait this, then twice as long...",
        )
        p.add_argument(
            "--restart-backoff-cap-seconds",
            type=float,
            default=float(_env("RESTART_BACKOFF_CAP_SECONDS", "60")),
            help="the longest wait before a replacement",
        )
        p.add_argument(
            "--node-lost-seconds",
            type=float,
            default=float(_env("NODE_LOST_SECONDS", "40")),
            help="a pod whose node has not been Ready this long is replaced elsewhere (a deleted node: at once)",
        )
    a = p.parse_args(argv)
    gates = _csv(getattr(a, "gates", ""))
    unknown = set(gates) - set(CONCERNS)
    if unknown:
        p.error(f"unknown gate(s) {sorted(unknown)}; choose from {', '.join(CONCERNS)}")
    if a.qps <= 0 or a.burst < 1 or a.workers < 0:
        p.error("--qps must be > 0, --burst at least 1, --workers at least 0 (0: no limit)")
    return ControllerConfig(
        controller=controller,
        namespaces=tuple(a.namespace) if a.namespace else _csv(_env("NAMESPACES", "")),
        metrics_address=a.metrics_address,
        metrics_port=a.metrics_port,
        log_level=a.log_level,
        qps=a.qps,
        burst=a.burst,
        workers=a.workers,
        resync_seconds=a.resync_seconds,
        peering=a.peering,
        peering_priority=a.peering_priority,
        peering_lifetime=a.peering_lifetime,
        pod_name=os.environ.get("POD_NAME", os.uname().nodename),
        gates=gates,
        init_image=getattr(a, "init_image", "busybox:1.36"),
        restart_backoff_seconds=getattr(a, "restart_backoff_seconds", 1.0),
        restart_backoff_cap_seconds=getattr(a, "restart_backoff_cap_seconds", 60.0),
        node_lost_seconds=getattr(a, "node_lost_seconds", 40.0),
    )
