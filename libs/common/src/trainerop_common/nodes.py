"""When a node counts as lost (pure): one rule for the trainer (which replaces the pods there) and
the quota controller (which renegotiates the run's admission).

A node is lost when it is gone from the API, or when its Ready condition has not been True for
the grace period (``--node-lost-seconds``): NotReady (False) or unreachable (Unknown).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .clock import parse_time

NODE_LOST_SECONDS = 40.0  # the default grace period of both controllers' --node-lost-seconds


@dataclass(frozen=True)
class NodeReadiness:
    name: str
    ready: str  # status of the Ready condition: True, False or Unknown
    since: str | None  # its lastTransitionTime


def readiness(body: Mapping[str, Any]) -> NodeReadiness:
    conditions = (body.get("status") or {}).get("conditions") or ()
    ready: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    return NodeReadiness(
        str(body["metadata"]["name"]), str(ready.get("status", "Unknown")), ready.get("lastTransitionTime")
    )


def gone_reason(name: str) -> str:
    return f"node {name} no longer exists"


def lost(node: NodeReadiness, now: datetime, grace: float) -> tuple[str | None, float | None]:
    """(why the node counts as lost, None if it does not), and the seconds until a node that is not
    Ready now would count as lost (None when it is Ready or already lost)."""
    if node.ready == "True" or not node.since:
        return None, None
    left = grace - (now - parse_time(node.since)).total_seconds()
    if left > 0:
        return None, left
    state = "NotReady" if node.ready == "False" else "unreachable"
    return f"node {node.name} has been {state} since {node.since}", None
