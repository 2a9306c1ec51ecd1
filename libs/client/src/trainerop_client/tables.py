"""What `kubectl trainer get`, `checkpoints` and `audit` print (pure): columns as kubectl aligns
them."""

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .progress import Snapshot, time_left


def aligned(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]
    return "\n".join(
        "   ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]
    )


def trainers_table(trainers: Sequence[Mapping[str, Any]], now: datetime) -> str:
    rows = []
    for t in trainers:
        s = Snapshot.of(t)
        left = "" if s.finished else time_left(s.eta, now)
        rows.append([s.name, s.phase, f"{s.percent}%", left, s.epochs_done, str(s.restarts), s.checkpoint, s.reason])
    return aligned(["NAME", "PHASE", "PROGRESS", "TIME LEFT", "EPOCH", "RESTARTS", "CHECKPOINT", "REASON"], rows)


def checkpoints_table(checkpoints: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for c in checkpoints:
        status = c.get("status") or {}
        shards = f"{status.get('verifiedShards', 0)}/{c['spec'].get('shardCount', 1)}"
        rows.append(
            [
                c["metadata"]["name"],
                str(c["spec"].get("step", "")),
                status.get("phase", ""),
                shards,
                status.get("commitTime", ""),
            ]
        )
    return aligned(["NAME", "STEP", "PHASE", "VERIFIED", "COMMITTED"], rows)


def audit_table(records: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for r in records:
        spec = r["spec"]
        rows.append(
            [spec.get("stageTimestamp", ""), spec.get("action", ""), spec["user"]["username"], spec.get("message", "")]
        )
    return aligned(["TIME", "ACTION", "USER", "MESSAGE"], rows)
