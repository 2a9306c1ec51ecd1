"""The quota controller's own flags (docs/controllers.md, docs/quota.md)."""

from dataclasses import dataclass

from trainerop_common.config import flag
from trainerop_common.nodes import NODE_LOST_SECONDS


@dataclass(frozen=True)
class QuotaConfig:
    node_lost_seconds: float = flag(
        NODE_LOST_SECONDS, "renegotiate a run on a node not Ready this long (a deleted node: at once)"
    )
