"""When a node counts as lost: one rule for the trainer (replace its pods) and the quota controller
(renegotiate the run), as a table."""

from datetime import UTC, datetime

import pytest

from trainerop_common.nodes import NodeReadiness, lost, readiness
from trainerop_trainer.views import lost_nodes

NOW = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ready", "since", "lost_because", "left"),
    [
        ("True", "2026-01-01T00:00:00Z", None, None),  # Ready: never lost
        ("False", "2026-01-01T00:09:00Z", "node n has been NotReady since 2026-01-01T00:09:00Z", None),
        ("Unknown", "2026-01-01T00:09:00Z", "node n has been unreachable since 2026-01-01T00:09:00Z", None),
        ("Unknown", "2026-01-01T00:09:50Z", None, 20.0),  # within the grace period: look again in 20 s
        ("False", None, None, None),  # no transition time: nothing to count from
    ],
)
def test_a_node_not_ready_for_the_grace_period_is_lost(
    ready: str, since: str | None, lost_because: str | None, left: float | None
) -> None:
    assert lost(NodeReadiness("n", ready, since), NOW, grace=30) == (lost_because, left)


def test_a_node_without_a_ready_condition_is_unknown_since_never() -> None:
    node = readiness({"metadata": {"name": "n"}, "status": {"conditions": [{"type": "MemoryPressure"}]}})
    assert node == NodeReadiness("n", "Unknown", None)


def test_the_trainer_counts_gone_nodes_too_and_looks_again_when_the_first_grace_ends() -> None:
    nodes = [
        NodeReadiness("ok", "True", "2026-01-01T00:00:00Z"),
        NodeReadiness("down", "False", "2026-01-01T00:09:00Z"),
        NodeReadiness("flaky", "Unknown", "2026-01-01T00:09:50Z"),
    ]
    loss = lost_nodes(nodes, {"ok", "down", "flaky", "gone"}, NOW, grace=30)
    assert loss.lost == {
        "down": "node down has been NotReady since 2026-01-01T00:09:00Z",
        "gone": "node gone no longer exists",
    }
    assert loss.next_check == 20.0
