"""A run's progress as a person reads it (pure): from a Trainer's status, one snapshot and one
line — phase, epoch and step, percent, time left, restarts, the latest checkpoint, metrics."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

FINISHED = ("Succeeded", "Failed")


def parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


@dataclass(frozen=True)
class Snapshot:
    name: str
    phase: str = "Pending"
    reason: str = ""
    message: str = ""
    percent: int = 0
    epoch: int = 0
    epochs: int = 0
    step: int = 0
    total_steps: int | None = None
    eta: datetime | None = None
    restarts: int = 0
    checkpoint: str = ""
    metrics: Mapping[str, str] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED

    @property
    def epochs_done(self) -> str:
        """``3/10``, or ``3`` when the run does not say how many epochs it has (a Kubeflow job)."""
        return f"{self.epoch}/{self.epochs}" if self.epochs else str(self.epoch)

    @classmethod
    def of(cls, trainer: Mapping[str, Any]) -> "Snapshot":
        status = trainer.get("status") or {}
        progress = status.get("progress") or {}
        replicas = (status.get("topology") or {}).get("replicas") or {}
        return cls(
            name=str(trainer["metadata"]["name"]),
            phase=str(status.get("phase") or "Pending"),
            reason=str(status.get("reason") or ""),
            message=str(status.get("message") or ""),
            percent=int(progress.get("percent") or 0),
            epoch=int(progress.get("epoch") or 0),
            epochs=int((trainer.get("spec") or {}).get("epochs") or 0),
            step=int(progress.get("step") or 0),
            total_steps=progress.get("totalSteps"),
            eta=parse_time(progress.get("estimatedCompletionTime")),
            restarts=sum(int(r.get("restarts") or 0) for r in replicas.values()),
            checkpoint=str((status.get("checkpoint") or {}).get("latest") or ""),
            metrics=dict(progress.get("metrics") or {}),
        )


def time_left(eta: datetime | None, now: datetime) -> str:
    """``12m30s`` until ``eta``; ``-`` when there is no estimate, ``0s`` once it has passed."""
    if eta is None:
        return "-"
    seconds = max(0, int((eta - now).total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def line(s: Snapshot, now: datetime | None = None) -> str:
    """Everything but the bar: ``Running · epoch 3/10 · step 1200/4000 · ETA 12m30s · restarts 0 ·
    checkpoint t-step-1200 · loss 0.12`` (the reason when it is not just the phase)."""
    now = now or datetime.now(UTC)
    steps = f"step {s.step}/{s.total_steps}" if s.total_steps else f"step {s.step}"
    parts = [s.phase if s.reason in ("", s.phase) else f"{s.phase} ({s.reason})", f"epoch {s.epochs_done}", steps]
    if not s.finished:
        parts.append(f"ETA {time_left(s.eta, now)}")
    parts.append(f"restarts {s.restarts}")
    if s.checkpoint:
        parts.append(f"checkpoint {s.checkpoint}")
    parts += [f"{k} {v}" for k, v in sorted(s.metrics.items())]
    return " · ".join(parts)
