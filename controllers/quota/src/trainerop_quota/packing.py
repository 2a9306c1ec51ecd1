"""Topology-aware packing of one gang (pure): the fewest domains of a hierarchy of node labels
that hold every replica, ring neighbours together (docs/design/placement.md).

Levels are label keys, finest first (``nvidia.com/gpu.clique``, then ``topology.kubernetes.io/zone``).
A node's domain at a level is its values of that level and of every coarser one; a node without
the level's label is a domain of its own there (and one without a coarser level's label is in
the same coarser domain as the others without it). Replicas are laid out in ring order, filling one
domain before the next and one node before the next, so a ring over k domains crosses a domain
boundary k times."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from trainerop_common.api.quota import PackingMode, PlacementScore
from trainerop_common.topology import Role

from .capacity import Resources, fits, subtract
from .taints import Selector, Taint

Slot = tuple[Role, int]  # a replica: role and index
# The all-reduce ring: the leader (rank 0), the workers by index; then the roles outside it.
RING_ORDER: tuple[Role, ...] = ("master", "chief", "worker", "ps", "evaluator")
RING_ROLES: tuple[Role, ...] = RING_ORDER[:3]
ROOM_ORDER = ("nvidia.com/gpu", "cpu", "memory")  # how room is compared: best fit takes the least


@dataclass(frozen=True)
class Site:
    """A node as packing sees it: its name and labels (where it is in the hierarchy), and the
    taints that keep pods off it."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True)
class Want:
    """A replica to place: its requests, and the nodes it may go to (labels, tolerations)."""

    slot: Slot
    requests: Resources
    selector: Selector = field(default_factory=Selector)


@dataclass(frozen=True)
class Packing:
    where: dict[Slot, str]  # the node of each replica: all of them, or none
    score: PlacementScore | None  # None: the gang was not placed


Free = dict[str, Resources]  # node -> what it has free; packing spends it


def ring_key(slot: Slot) -> tuple[int, int]:
    return RING_ORDER.index(slot[0]), slot[1]


def domain(site: Site, levels: Sequence[str], at: int) -> tuple[str, ...]:
    """The site's domain at ``levels[at]``: its values from the coarsest level down to that one
    (below the finest level, ``at`` < 0: the node itself)."""
    if at < 0:
        return (site.name,)
    coarser = tuple(site.labels.get(key, "") for key in reversed(levels[at + 1 :]))  # unlabelled: one ""
    return (*coarser, site.labels.get(levels[at]) or f"node:{site.name}")


def room(sites: Sequence[Site], free: Free) -> tuple[Decimal, ...]:
    return tuple(sum((free[s.name].get(r, Decimal(0)) for s in sites), Decimal(0)) for r in ROOM_ORDER)


def eligible(site: Site, want: Want) -> bool:
    return want.selector.allows(site.labels, site.taints)


def fill(sites: Sequence[Site], free: Free, wants: Sequence[Want]) -> list[str]:
    """Nodes for the longest prefix of ``wants`` the sites hold, one node filled before the next in
    the order given (spends ``free``)."""
    out: list[str] = []
    for want in wants:
        node = next((s.name for s in sites if eligible(s, want) and fits(free[s.name], want.requests)), None)
        if node is None:
            break
        subtract(free[node], want.requests)
        out.append(node)
    return out


def prefix_held(sites: Sequence[Site], free: Free, wants: Sequence[Want]) -> int:
    """How many of ``wants``, in order, the sites hold (most room first), without spending it."""
    trial = {s.name: dict(free[s.name]) for s in sites}
    return len(fill(sorted(sites, key=lambda s: room([s], trial), reverse=True), trial, wants))


def partition(sites: Sequence[Site], levels: Sequence[str], at: int) -> list[list[Site]]:
    """The sites grouped by domain at ``levels[at]`` (each node alone when ``at`` < 0)."""
    groups: dict[tuple[str, ...], list[Site]] = {}
    for s in sites:
        groups.setdefault(domain(s, levels, at), []).append(s)
    return [groups[k] for k in sorted(groups)]


def weight(group: Sequence[Site], prefer: Mapping[str, int]) -> int:
    return sum(prefer.get(s.name, 0) for s in group)


def lay_out(
    group: Sequence[Site], free: Free, wants: Sequence[Want], levels: Sequence[str], at: int, prefer: Mapping[str, int]
) -> list[str]:
    """Nodes for the longest prefix of ``wants`` the group holds, over the fewest of its domains at
    ``levels[at]`` (nodes when ``at`` < 0): a domain that holds all that is left, the one with the
    least room (best fit); else the one that holds the most. Domains whose nodes ``prefer`` weighs
    more come first. Spends ``free``."""
    children = partition(group, levels, at)
    placed: list[str] = []
    while len(placed) < len(wants) and children:
        rest = wants[len(placed) :]
        held = [prefix_held(c, free, rest) for c in children]
        whole = [c for c, n in zip(children, held, strict=True) if n == len(rest)]
        if whole:
            pick = min(whole, key=lambda c: (-weight(c, prefer), room(c, free)))
        elif max(held) > 0:
            pick = max(zip(children, held, strict=True), key=lambda c: (c[1], weight(c[0], prefer)))[0]
        else:
            break
        children.remove(pick)
        placed += fill(pick, free, rest) if at < 0 else lay_out(pick, free, rest, levels, at - 1, prefer)
    return placed


def pack(
    sites: Sequence[Site],
    free: Free,
    wants: Sequence[Want],
    levels: Sequence[str],
    level: str | None = None,
    mode: PackingMode = "Preferred",
    prefer: Mapping[str, int] | None = None,
) -> Packing:
    """Place the gang (in ring order) within one domain of ``level`` (default: the finest), or for
    ``Preferred`` the finest coarser level one domain of which holds it, else over the fewest
    domains of the whole cluster. ``prefer`` weighs nodes (where the run is, a plugin's preferred
    affinity): among domains that hold the gang, the heaviest first. Spends ``free`` only when
    every replica has a node."""
    prefer = prefer or {}
    ordered = sorted(wants, key=lambda w: ring_key(w.slot))
    start = levels.index(level) if level in levels else (len(levels) if mode == "Required" else 0)
    tries = range(start, min(start + 1, len(levels))) if mode == "Required" else range(start, len(levels))
    for at in tries:
        trial = {k: dict(v) for k, v in free.items()}
        whole = [d for d in partition(sites, levels, at) if prefix_held(d, trial, ordered) == len(ordered)]
        if whole:
            chosen = min(whole, key=lambda d: (-weight(d, prefer), room(d, trial)))
            nodes = lay_out(chosen, trial, ordered, levels, at - 1, prefer)
            if len(nodes) == len(ordered):
                return packed(sites, free, trial, ordered, nodes, levels)
    if mode == "Required":
        return Packing({}, None)
    trial = {k: dict(v) for k, v in free.items()}
    nodes = lay_out(sites, trial, ordered, levels, len(levels) - 1, prefer)
    return packed(sites, free, trial, ordered, nodes, levels)


def packed(
    sites: Sequence[Site], free: Free, trial: Free, ordered: Sequence[Want], nodes: Sequence[str], levels: Sequence[str]
) -> Packing:
    """The result, with its score, when every replica has a node (``free`` then takes the trial's
    spending); else nothing placed."""
    if len(nodes) < len(ordered):
        return Packing({}, None)
    free.update(trial)
    where = {w.slot: n for w, n in zip(ordered, nodes, strict=True)}
    return Packing(where, score(where, {s.name: s for s in sites}, levels))


def score(where: Mapping[Slot, str], sites: Mapping[str, Site], levels: Sequence[str]) -> PlacementScore:
    """How the replicas sit: the finest level one domain of which holds them all, the finest-level
    domains they span, and the neighbours of the ranks' ring (master or chief, then the workers)
    in different finest-level domains. A node not in ``sites`` counts as a domain of its own."""

    def at(node: str, level: int) -> tuple[str, ...]:
        return domain(sites.get(node) or Site(node), levels, level)

    placed = sorted(((s, n) for s, n in where.items() if n), key=lambda p: ring_key(p[0]))
    within = next((levels[i] for i in range(len(levels)) if len({at(n, i) for _, n in placed}) == 1), None)
    finest = [at(n, 0 if levels else -1) for _, n in placed]
    ring = [d for (s, _), d in zip(placed, finest, strict=True) if s[0] in RING_ROLES]
    cross = sum(1 for i in range(len(ring)) if ring[i] != ring[(i + 1) % len(ring)]) if len(ring) > 1 else 0
    return PlacementScore(level=within, domains=len(set(finest)), cross_neighbours=cross)
