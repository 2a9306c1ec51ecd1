"""The quota controller's own flags (docs/controllers.md, docs/quota.md)."""

from dataclasses import dataclass

from trainerop_common.config import flag
from trainerop_common.nodes import NODE_LOST_SECONDS


@dataclass(frozen=True)
class QuotaConfig:
    node_lost_seconds: float = flag(
        NODE_LOST_SECONDS, "renegotiate a run on a node not Ready this long (a deleted node: at once)"
    )
    plan_rest: float = flag(
        3.0,
        "after a plan, wait this many times its duration before the next (events meanwhile coalesce): "
        "planning, which reads every Trainer and pod, takes at most 1/(1+this) of the time",
    )
