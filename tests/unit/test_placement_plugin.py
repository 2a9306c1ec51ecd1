"""The placement plugin over real gRPC (docs/placement-plugins.md): the example plugin's choices,
and the quota controller's adapter and plan with it — hints followed, bad hints ignored, a slow
plugin timed out, a plugin down, mutual TLS. The runtime's Event and spawn are recorded in memory
(the plugin, its server and the plan are the real ones)."""

import asyncio
import importlib.util
from collections.abc import AsyncIterator, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from testbed import cluster as cluster_tool
from tests.factories import trainer_body
from trainerop_common.api.base import PodContribution
from trainerop_common.api.quota import PluginHint
from trainerop_common.api.trainer import QuotaStatus
from trainerop_placement.channel import serve
from trainerop_placement.v1 import placement_pb2 as pb
from trainerop_placement.v1 import placement_pb2_grpc
from trainerop_quota.capacity import NodeInfo
from trainerop_quota.config import QuotaConfig
from trainerop_quota.decide import Observed, TrainerInfo, plan
from trainerop_quota.ledger import Ledger
from trainerop_quota.plugin import FAILED_EVENT, PlacementPlugin, context, suggestion, waiting

from .test_decide_quota import GPU, node, policy, spec, trainer, world

REPO = Path(__file__).resolve().parents[2]
CARBON = "example.com/carbon-intensity"


def example() -> Any:
    loaded = importlib.util.spec_from_file_location("carbon_plugin", REPO / "examples/placement/carbon_plugin.py")
    assert loaded is not None
    assert loaded.loader is not None
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    return module


carbon = example()


def green(name: str, intensity: int | None, kind: str = "on-demand") -> NodeInfo:
    return node(name, kind, labels={CARBON: str(intensity)} if intensity is not None else {})


NODES = [green("coal-0", 800), green("coal-1", 800), green("wind-0", 20), green("wind-1", 20), green("none-0", None)]


def candidate(name: str, intensity: int | None, gpus: float = 8) -> pb.CandidateNode:
    labels = {CARBON: str(intensity)} if intensity is not None else {}
    return pb.CandidateNode(name=name, labels=labels, free={GPU: gpus}, capacity_type="on-demand")


def question(workers: int, *nodes: pb.CandidateNode, selector: dict[str, str] | None = None) -> pb.WorkerContext:
    replicas = [pb.Replica(role="worker", index=i, requests={GPU: 8}, node_selector=selector) for i in range(workers)]
    return pb.WorkerContext(replicas=replicas, cluster_load=pb.ClusterLoad(nodes=list(nodes)))


# nodes (name, intensity, free GPUs), workers of 8 GPUs, selector -> the nodes chosen in rank order
EXAMPLE_ROWS: list[tuple[list[tuple[str, int | None, float]], int, dict[str, str] | None, list[str]]] = [
    ([("a", 800, 8), ("b", 20, 8), ("c", None, 8)], 2, None, ["b", "a"]),
    ([("a", 800, 8), ("b", 20, 4), ("c", None, 8)], 2, None, ["a", "c"]),  # b is too full
    ([("a", 800, 8), ("b", 20, 8)], 3, None, ["b", "a"]),  # the third is left to the built-in placement
    ([("a", 800, 8), ("b", 20, 8)], 1, {CARBON: "800"}, ["a"]),
]


@pytest.mark.parametrize(("nodes", "workers", "selector", "chosen"), EXAMPLE_ROWS)
def test_the_example_puts_each_replica_on_the_lowest_valued_node(
    nodes: list[tuple[str, int | None, float]], workers: int, selector: dict[str, str] | None, chosen: list[str]
) -> None:
    hint = carbon.suggest(question(workers, *(candidate(*n) for n in nodes), selector=selector), CARBON)
    assert [r.node for r in hint.replicas] == chosen
    assert [(t.weight, t.match_expressions[0].values) for t in hint.preferred] == [(100, ["20"])]


class Recorded:
    """The runtime's side effects the adapter uses: spawn (run now), Events (kept), reads (none)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.kube = self

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(coro))

    def event(self, body: Any, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))

    async def get(self, kind: str, name: str, namespace: str | None = None) -> None:
        return None


class Answer(placement_pb2_grpc.PlacementSchedulerServicer):
    """A plugin that answers what it is given (after a delay), and keeps the question."""

    def __init__(self, hint: pb.PlacementHint, delay: float = 0) -> None:
        self.hint, self.delay = hint, delay
        self.asked: list[pb.WorkerContext] = []

    async def SuggestPlacement(  # noqa: N802 - the gRPC method's name
        self, request: pb.WorkerContext, context: Any
    ) -> pb.PlacementHint:
        self.asked.append(request)
        await asyncio.sleep(self.delay)
        return self.hint


@pytest.fixture
async def carbon_server() -> AsyncIterator[int]:
    server, port = await serve(carbon.CarbonPlugin(CARBON), "localhost:0")
    yield port
    await server.stop(None)


def waiting_run(workers: int = 2) -> tuple[TrainerInfo, dict[str, Any], Observed]:
    t = trainer("a", spec(workers=workers, scheduling={"preference": "OnDemandOnly"}))
    body = trainer_body("a", t.namespace, uid=t.uid)
    return t, body, world([t], NODES, policies=[policy()])


async def ask(port: int, deadline: float = 5, tls_dir: str = "") -> tuple[PlacementPlugin, Recorded, Observed]:
    """One question through the adapter, answered: the plan's next view."""
    runtime = Recorded()
    asked = asyncio.Event()
    config = QuotaConfig(
        placement_plugin_address=f"localhost:{port}",
        placement_plugin_timeout=deadline,
        placement_plugin_tls_dir=tls_dir,
    )
    adapter = PlacementPlugin(runtime, config, asked.set)  # type: ignore[arg-type]
    t, body, obs = waiting_run()
    first = adapter.round(obs, {t.uid: body})
    assert first.asking == {t.uid}
    assert t.uid not in plan(first).decisions  # not admitted before the plugin answers
    await asyncio.wait_for(asked.wait(), 10)
    again = adapter.round(obs, {t.uid: body})
    assert again.asking == frozenset()
    assert not runtime.tasks[1:]  # asked once for the generation
    await adapter.close()
    return adapter, runtime, again


def admitted(obs: Observed) -> tuple[list[str], PluginHint | None]:
    (decision,) = plan(obs).decisions.values()
    q = QuotaStatus.model_validate(decision.quota)
    assert q.contribution is not None
    assert q.contribution.grant is not None
    assert q.contribution.grant.placement is not None
    assert q.placement_score is not None
    return q.contribution.grant.placement["worker"], q.placement_score.plugin


async def test_the_plan_follows_the_plugin(carbon_server: int) -> None:
    _, runtime, obs = await ask(carbon_server)
    nodes, plugin = admitted(obs)
    assert sorted(nodes) == ["wind-0", "wind-1"]  # the built-in best fit ties on room: it would pick coal-0 first
    assert plugin == PluginHint(suggested=2, followed=2, reason=f"lowest {CARBON} first: 2 of 2 replicas placed")
    assert runtime.events == []


async def test_what_the_plugin_is_told() -> None:
    answer = Answer(pb.PlacementHint())
    server, port = await serve(answer, "localhost:0")
    try:
        await ask(port)
    finally:
        await server.stop(None)
    (asked,) = answer.asked
    t = waiting_run()[0]
    assert (asked.trainer.uid, asked.trainer.framework, list(asked.capacity_order)) == (
        t.uid,
        t.spec.framework,
        ["on-demand"],
    )
    assert [(r.role, r.index, r.requests[GPU]) for r in asked.replicas] == [("worker", 0, 8.0), ("worker", 1, 8.0)]
    assert {n.name: n.free[GPU] for n in asked.cluster_load.nodes} == {n.name: 8.0 for n in NODES}
    assert asked.model.size_bytes == 0


def test_the_plugin_is_told_the_claims_the_run_mounts() -> None:
    """Data locality: each replica's own claim (spec.storage) and the claims its pods mount from
    the profile and the pod template overrides (not the volumes that are no claim)."""
    override = {"worker": {"spec": {"volumes": [{"name": "ds", "persistentVolumeClaim": {"claimName": "datasets"}}]}}}
    s = spec(workers=2, storage={"size": "10Gi"}, podTemplateOverrides=override)
    cache = [{"name": "cache", "persistentVolumeClaim": {"claimName": "hf-cache"}}, {"name": "tmp", "emptyDir": {}}]
    t = trainer("a", s, profile=PodContribution(volumes=cache))
    free = {n.name: n.allocatable for n in NODES}
    told = context(t, trainer_body("a", t.namespace, uid=t.uid), world([t], NODES), free, 0)
    assert [r.volume_claim for r in told.replicas] == ["a-worker-0-data", "a-worker-1-data"]
    assert list(told.data_locality.volume_claims) == ["datasets", "hf-cache"]
    plain = context(trainer("b"), trainer_body("b"), world([], NODES), free, 0)
    assert ([r.volume_claim for r in plain.replicas], list(plain.data_locality.volume_claims)) == (["", ""], [])


@pytest.mark.parametrize(
    ("default", "profile_says", "asked"),
    [("Ask", None, True), ("Ask", "Skip", False), ("Skip", None, False), ("Skip", "Ask", True)],
)
async def test_a_profile_asks_for_the_plugin_or_skips_it(default: str, profile_says: Any, asked: bool) -> None:
    """--placement-plugin-default, and a profile's placementPlugin over it: a run not to be asked
    about is planned at once with the built-in placement."""
    config = QuotaConfig(placement_plugin_address="localhost:1", placement_plugin_default=default)
    runtime = Recorded()
    adapter = PlacementPlugin(runtime, config, lambda: None)  # type: ignore[arg-type]
    t, body, obs = waiting_run()
    t = replace(t, placement_plugin=profile_says)
    view = adapter.round(replace(obs, trainers=[t]), {t.uid: body})
    assert (view.asking == {t.uid}) is asked
    assert (t.uid in plan(view).decisions) is not asked
    for task in runtime.tasks:
        task.cancel()
    await adapter.close()


async def test_a_run_whose_profile_has_not_answered_is_held_until_it_does() -> None:
    """Whether to ask depends on the profile: until its answer for the run's generation is written,
    the run is neither asked about nor admitted with the built-in placement."""
    config = QuotaConfig(placement_plugin_address="localhost:1", placement_plugin_default="Skip")
    runtime = Recorded()
    adapter = PlacementPlugin(runtime, config, lambda: None)  # type: ignore[arg-type]
    t, body, obs = waiting_run()
    pending = replace(t, profile_pending=True)
    view = adapter.round(replace(obs, trainers=[pending]), {t.uid: body})
    assert view.asking == {t.uid}
    assert runtime.tasks == []
    assert t.uid not in plan(view).decisions
    answered = adapter.round(replace(obs, trainers=[replace(t, placement_plugin="Skip")]), {t.uid: body})
    assert t.uid in plan(answered).decisions
    await adapter.close()


def test_a_run_kueue_admits_is_not_asked_about() -> None:
    t, _, obs = waiting_run()
    queued = replace(t, queue="team")
    assert waiting(queued, obs)  # without --kueue the label is not read
    assert not waiting(queued, replace(obs, kueue=True, trainers=[queued]))


def on(index: int, node: str) -> pb.ReplicaNode:
    return pb.ReplicaNode(role="worker", index=index, node=node)


@pytest.mark.parametrize(
    ("replicas", "followed"),
    [
        ([pb.ReplicaNode(role="worker", index=0, node="gone"), pb.ReplicaNode(role="worker", index=1, node="gone")], 0),
        (
            [
                pb.ReplicaNode(role="worker", index=0, node="wind-0"),
                pb.ReplicaNode(role="worker", index=1, node="wind-0"),
            ],
            1,
        ),
    ],
    ids=["a node that does not exist", "two pods on a node that holds one"],
)
async def test_a_hint_that_cannot_hold_its_pods_is_not_followed(replicas: list[pb.ReplicaNode], followed: int) -> None:
    server, port = await serve(Answer(pb.PlacementHint(replicas=replicas)), "localhost:0")
    try:
        _, runtime, obs = await ask(port)
    finally:
        await server.stop(None)
    nodes, plugin = admitted(obs)
    assert len(set(nodes)) == 2  # each pod on a node that holds it
    assert plugin is not None
    assert (plugin.suggested, plugin.followed) == (2, followed)
    assert runtime.events == []


async def test_a_slow_plugin_is_timed_out_and_the_built_in_placement_used() -> None:
    server, port = await serve(Answer(pb.PlacementHint(), delay=5), "localhost:0")
    try:
        _, runtime, obs = await ask(port, deadline=0.2)
    finally:
        await server.stop(None)
    _, plugin = admitted(obs)
    assert plugin is not None
    assert plugin.failed is not None
    assert "DEADLINE_EXCEEDED" in plugin.failed
    ((kind, reason, message),) = runtime.events
    assert (kind, reason) == ("Warning", FAILED_EVENT)
    assert message.endswith("the built-in placement is used")


async def test_a_plugin_that_is_down_leaves_the_built_in_placement() -> None:
    server, port = await serve(Answer(pb.PlacementHint()), "localhost:0")
    await server.stop(None)  # nothing listens on the port any more
    _, runtime, obs = await ask(port)
    nodes, plugin = admitted(obs)
    assert len(nodes) == 2
    assert plugin is not None
    assert plugin.failed is not None
    assert "UNAVAILABLE" in plugin.failed
    assert [r for _, r, _ in runtime.events] == [FAILED_EVENT]


def test_a_malformed_hint_is_a_failure_in_its_own_words() -> None:
    wrong_role = pb.PlacementHint(replicas=[pb.ReplicaNode(role="boss", index=0, node="n")])
    assert "role 'boss'" in suggestion(wrong_role, 1).failed
    term = pb.PreferredTerm(weight=500, match_expressions=[pb.LabelRequirement(key="k", operator="Near")])
    failed = suggestion(pb.PlacementHint(preferred=[term]), 1).failed
    assert "operator 'Near' of 'k'" in failed
    assert "weight 500 (1 to 100)" in failed


def tls_dirs(tmp: Path) -> tuple[str, str]:
    """A CA, the plugin's serving certificate for localhost and the controller's client
    certificate, each end's directory in a TLS Secret's layout."""
    pki = tmp / "pki"
    cluster_tool.make_ca(pki, "ca", "placement-plugin-ca")
    cluster_tool.issue_certificate(pki, "plugin", "placement-plugin", None, server_names=["localhost"])
    cluster_tool.issue_certificate(pki, "quota", "trainer-operator-quota", None)
    dirs = []
    for end in ("plugin", "quota"):
        folder = tmp / end
        folder.mkdir()
        (folder / "ca.crt").write_bytes((pki / "ca.crt").read_bytes())
        (folder / "tls.crt").write_bytes((pki / f"{end}.crt").read_bytes())
        (folder / "tls.key").write_bytes((pki / f"{end}.key").read_bytes())
        dirs.append(str(folder))
    return dirs[0], dirs[1]


async def test_mutual_tls(tmp_path: Path) -> None:
    plugin_dir, quota_dir = tls_dirs(tmp_path)
    server, port = await serve(carbon.CarbonPlugin(CARBON), "localhost:0", plugin_dir)
    try:
        _, runtime, obs = await ask(port, tls_dir=quota_dir)
        assert sorted(admitted(obs)[0]) == ["wind-0", "wind-1"]
        _, _, plaintext = await ask(port)  # a client without a certificate is not answered
        _, plugin = admitted(plaintext)
        assert plugin is not None
        assert plugin.failed is not None
        assert "UNAVAILABLE" in plugin.failed
    finally:
        await server.stop(None)
    assert runtime.events == []


def test_quantities_travel_in_base_units() -> None:
    t, body, obs = waiting_run()
    asked = context(t, body, obs, Ledger(obs).free, 1 << 30)
    assert dict(asked.replicas[0].requests) == {GPU: 8.0, "cpu": 4.0, "memory": float(16 * 2**30), "pods": 1.0}
    assert asked.model.size_bytes == 1 << 30
    assert asked.cluster_load.nodes[0].allocatable["memory"] == float(2**40)
