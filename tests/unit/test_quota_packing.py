"""Topology-aware packing of one gang (pure): fewest domains, best fit, ring neighbours together."""

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainerop_common.api.quota import PackingMode, PlacementScore
from trainerop_quota.packing import Free, Site, Slot, Want, pack
from trainerop_quota.taints import Selector, Taint, Tolerates

GPU = "nvidia.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
ZONE = "topology.kubernetes.io/zone"
LEVELS = (CLIQUE, ZONE)


def cluster(layout: str, gpus: int = 8) -> tuple[list[Site], Free]:
    """``"a:2 b:3"``: clique a of 2 nodes, clique b of 3; ``zone/clique:n`` puts the clique in a
    zone (default z1); ``-:n`` nodes without a clique label."""
    sites, free = [], {}
    for part in layout.split():
        where, count = part.split(":")
        zone, _, clique = where.rpartition("/")
        for i in range(int(count)):
            labels = {ZONE: zone or "z1"} | ({CLIQUE: clique} if clique != "-" else {})
            name = f"{zone or 'z1'}-{clique}-{i}"
            sites.append(Site(name, labels))
            free[name] = {GPU: Decimal(gpus), "pods": Decimal(110)}
    return sites, free


def gang(workers: int, gpus: int = 4, master: bool = False) -> list[Want]:
    requests = {GPU: Decimal(gpus), "pods": Decimal(1)}
    wants = [Want(("worker", i), requests) for i in range(workers)]
    return ([Want(("master", 0), requests)] if master else []) + wants


# layout, gang (workers, GPUs each, master), mode, level asked ->
# complete, level one domain of which holds it, cliques spanned, cross-clique ring neighbours
ROWS = [
    ("a:2 b:2", (4, 4, False), "Preferred", CLIQUE, True, CLIQUE, 1, 0),
    ("a:2 b:2", (8, 4, False), "Preferred", CLIQUE, True, ZONE, 2, 2),
    ("a:2 b:2", (6, 4, False), "Required", CLIQUE, False, None, 0, 0),  # no clique holds 6
    ("a:2 b:2", (6, 4, False), "Required", ZONE, True, ZONE, 2, 2),
    ("a:3 b:3 c:3", (8, 8, True), "Preferred", CLIQUE, True, ZONE, 3, 3),
    ("z1/a:2 z2/b:2 z2/c:2", (6, 4, False), "Preferred", CLIQUE, True, ZONE, 2, 2),
    ("z1/a:1 z2/b:1", (4, 4, False), "Preferred", CLIQUE, True, None, 2, 2),
    ("z1/a:1 z2/b:1", (4, 4, False), "Required", ZONE, False, None, 0, 0),
    ("a:2 b:2", (10, 4, False), "Preferred", CLIQUE, False, None, 0, 0),
    ("-:3", (2, 4, False), "Required", CLIQUE, True, CLIQUE, 1, 0),
    ("-:3", (3, 8, False), "Required", CLIQUE, False, None, 0, 0),
]


@pytest.mark.parametrize(("layout", "shape", "mode", "level", "complete", "within", "domains", "cross"), ROWS)
def test_a_gang_over_the_fewest_domains(
    layout: str,
    shape: tuple[int, int, bool],
    mode: PackingMode,
    level: str,
    complete: bool,
    within: str | None,
    domains: int,
    cross: int,
) -> None:
    sites, free = cluster(layout)
    got = pack(sites, free, gang(*shape), LEVELS, level, mode)
    assert (got.score is not None, len(got.where)) == (complete, shape[0] + shape[2] if complete else 0)
    if got.score is not None:
        assert (got.score.level, got.score.domains, got.score.cross_neighbours) == (within, domains, cross)


def test_the_smallest_domain_that_holds_the_gang_is_taken() -> None:
    sites, free = cluster("a:3 b:2 c:4")
    got = pack(sites, free, gang(4), LEVELS, CLIQUE)
    assert {n.split("-")[1] for n in got.where.values()} == {"b"}  # a and c stay for larger gangs


def test_ranks_fill_one_domain_then_the_next() -> None:
    sites, free = cluster("a:3 b:3")
    got = pack(sites, free, gang(5, gpus=8, master=True), LEVELS, CLIQUE)
    ring: list[Slot] = [("master", 0), *(("worker", i) for i in range(5))]
    cliques = [got.where[s].split("-")[1] for s in ring]
    assert cliques in (["a", "a", "a", "b", "b", "b"], ["b", "b", "b", "a", "a", "a"])


def test_a_replacement_goes_where_its_run_is() -> None:
    sites, free = cluster("a:3 b:1")
    free["z1-a-0"][GPU] = Decimal(0)  # the run's other replica
    replacement = [Want(("worker", 1), {GPU: Decimal(8)})]
    assert pack(sites, dict(free), replacement, LEVELS).where[("worker", 1)] == "z1-b-0"  # a new run: best fit
    got = pack(sites, free, replacement, LEVELS, prefer={"z1-a-0": 1})
    assert got.where[("worker", 1)].startswith("z1-a-")


def test_selectors_narrow_the_nodes() -> None:
    sites, free = cluster("a:2 b:2")
    wants = [Want(("worker", i), {GPU: Decimal(8)}, Selector({CLIQUE: "b"})) for i in range(2)]
    assert set(pack(sites, free, wants, LEVELS).where.values()) == {"z1-b-0", "z1-b-1"}


def test_a_tainted_node_takes_only_replicas_that_tolerate_its_taint() -> None:
    sites, free = cluster("a:2 b:2")
    tainted = {"z1-a-0", "z1-a-1"}
    sites = [Site(s.name, s.labels, (Taint("dedicated", "infra"),) if s.name in tainted else ()) for s in sites]
    plain = [Want(("worker", i), {GPU: Decimal(8)}) for i in range(2)]
    # the fewest domains would be either clique: only b's nodes are open to these replicas
    assert set(pack(sites, dict(free), plain, LEVELS).where.values()) == {"z1-b-0", "z1-b-1"}
    tolerant = Selector(tolerations=(Tolerates("dedicated", "Equal", "infra", "NoSchedule"),))
    wants = [Want(("worker", i), {GPU: Decimal(8)}, tolerant) for i in range(4)]
    assert set(pack(sites, free, wants, LEVELS).where.values()) == tainted | {"z1-b-0", "z1-b-1"}


def test_free_room_is_spent_only_by_a_complete_packing() -> None:
    sites, free = cluster("a:2")
    before = {k: dict(v) for k, v in free.items()}
    assert pack(sites, free, gang(5), LEVELS).score is None
    assert free == before
    assert pack(sites, free, gang(4), LEVELS).score is not None
    assert all(f[GPU] == 0 for f in free.values())


def test_a_clique_without_a_zone_label_is_still_one_domain() -> None:
    sites = [Site(f"n{i}", {CLIQUE: "a" if i < 2 else "b"}) for i in range(4)]
    free = {s.name: {GPU: Decimal(8), "pods": Decimal(110)} for s in sites}
    got = pack(sites, free, gang(2, gpus=8), LEVELS, CLIQUE, "Required")
    assert got.score == PlacementScore(level=CLIQUE, domains=1, cross_neighbours=0)


def test_without_levels_nodes_are_the_domains() -> None:
    sites, free = cluster("a:3")
    got = pack(sites, free, gang(4), ())
    assert got.score == PlacementScore(level=None, domains=2, cross_neighbours=2)


@settings(max_examples=60, deadline=None)
@given(
    cliques=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=5),
    workers=st.integers(min_value=1, max_value=24),
    gpus=st.sampled_from([1, 2, 4, 8]),
)
def test_never_over_commits_and_spans_no_more_cliques_than_needed(cliques: list[int], workers: int, gpus: int) -> None:
    sites, free = cluster(" ".join(f"c{i}:{n}" for i, n in enumerate(cliques)))
    got = pack(sites, free, gang(workers, gpus), LEVELS, CLIQUE)
    assert all(f[GPU] >= 0 for f in free.values())
    per_node = 8 // gpus
    capacity = sorted((n * per_node for n in cliques), reverse=True)
    fewest = next((k for k in range(1, len(capacity) + 1) if sum(capacity[:k]) >= workers), None)
    assert (got.score is not None) == (fewest is not None)
    if got.score is not None:
        assert got.score.domains == fewest
        assert got.score.cross_neighbours == (fewest if fewest != 1 else 0)
