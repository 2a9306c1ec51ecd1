"""Free capacity while a plan is made (pure): per node, per namespace budget, per capacity type;
and a run's pods under one admission option (its shape), placed pod by pod, best fit."""

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from trainerop_common.api import Grant
from trainerop_common.api.base import ResourceRequirements
from trainerop_common.api.quota import CapacityType, Packing, PackingMode
from trainerop_common.quantity import parse_quantity
from trainerop_common.topology import ROLES, Role, role_counts, role_override, worker_bounds

from .capacity import (
    SPOT_TOLERATIONS,
    NodeInfo,
    Resources,
    adjusted,
    fits,
    node_usage,
    role_requests,
    subtract,
    total,
)
from .model import Observed, PolicyInfo, TrainerInfo
from .packing import ROOM_ORDER, Site, Slot, domain, pack
from .packing import Want as PackWant
from .taints import Selector, tolerations_of


@dataclass(frozen=True)
class Option:
    kind: CapacityType
    workers: int
    resources: ResourceRequirements | None
    percent: int


def budget(policy: PolicyInfo, kind: CapacityType) -> Resources:
    raw = policy.spec.budgets.spot if kind == "spot" else policy.spec.budgets.on_demand
    return {name: parse_quantity(v) for name, v in (raw or {}).items()}


Want = tuple[Slot, Resources, Selector, str | None]  # its requests, where it may go, node hint


class Ledger:
    """Free capacity while the plan is made: per node, per namespace budget, per capacity type."""

    def __init__(self, world: Observed) -> None:
        self.nodes = {n.name: n for n in world.nodes}
        self.levels = world.levels
        used = node_usage(world.pods)
        self.free: dict[str, Resources] = {}
        for node in world.nodes:
            free = dict(node.allocatable)
            subtract(free, used.get(node.name, {}))
            self.free[node.name] = free
        self.debt: dict[CapacityType, Resources] = {}  # admitted pods the simulation could not place
        self.spent: dict[tuple[str, CapacityType], Resources] = {}  # (namespace, type) -> reserved
        self._open: dict[tuple[object, ...], bool] = {}  # (kind, selector) -> some node takes its pods

    def closed_roles(self, kind: CapacityType, s: "Shape") -> list[Role]:
        """The roles no schedulable node of ``kind`` takes at all, whatever its room: their node
        selector, or taints their pods do not tolerate (remembered per selector for the plan);
        none when there is no such node at all (then room is what is short)."""
        closed: list[Role] = []
        if (kind,) not in self._open:
            self._open[(kind,)] = any(n.kind == kind and n.schedulable for n in self.nodes.values())
        if not self._open[(kind,)]:
            return closed
        for role, selector in s.selectors.items():
            key = (kind, tuple(sorted(selector.labels.items())), selector.tolerations, selector.extended)
            if key not in self._open:
                self._open[key] = any(
                    n.kind == kind and n.schedulable and selector.allows(n.labels, n.taints)
                    for n in self.nodes.values()
                )
            if not self._open[key]:
                closed.append(role)
        return closed

    def place(
        self,
        kind: CapacityType,
        wants: Sequence[Want],
        commit: bool,
        released: Sequence[tuple[str, Resources]] = (),
        packing: Packing | None = None,
        prefer: Mapping[str, int] | None = None,
        kept: Sequence[str] = (),
    ) -> tuple[bool, dict[Slot, str]]:
        """Place each replica on a usable node of ``kind``: its hint when that still fits; the
        others packed into the fewest domains of the topology (:mod:`packing`; ``prefer``: weights
        of nodes, such as those the run is on, whose domains come first), and what packing leaves
        by best fit unless the run requires its level. A run that requires its level stays within
        the domain of the nodes it keeps (``kept``: its pods', its replicas' places), see
        :meth:`scopes`. ``released`` are pods about to be removed (a shrink): their room counts as
        free. Returns whether all fit and where each went."""
        given = {name: dict(f) for name, f in self.free.items()}
        for name, back in released:
            if name in given:
                subtract(given[name], {k: -v for k, v in back.items()})  # given back
        usable = [n for n in self.nodes.values() if n.kind == kind and n.schedulable]
        tries = self.scopes(usable, wants, packing, kept)
        for i, (scope, scoped) in enumerate(tries):
            free = {name: dict(f) for name, f in given.items()}
            ok, where, debt = self.fit(kind, usable, scope, scoped, free, packing, prefer)
            if ok or i == len(tries) - 1:
                break
        if commit:
            self.free = free
            self.debt[kind] = debt
        return ok, where

    def scopes(
        self, usable: Sequence[NodeInfo], wants: Sequence[Want], packing: Packing | None, kept: Sequence[str]
    ) -> list[tuple[list[NodeInfo], list[Want]]]:
        """The nodes a run may be placed on, with its hints, in the order to try. A run that
        requires its level is kept in one domain of it: that of most of the nodes it keeps, only;
        with none kept, that of most of its hints (a hint elsewhere is dropped), then anywhere
        without hints (a plugin's hints must not split it, nor keep it from a domain that holds
        it). Any other run: everywhere, as hinted."""
        everywhere = [(list(usable), list(wants))]
        if packing is None or packing.mode != "Required" or packing.level not in self.levels:
            return everywhere
        at = self.levels.index(packing.level)

        def home_of(name: str) -> tuple[str, ...]:
            return domain(Site(name, self.nodes[name].labels), self.levels, at)

        held = [n for n in kept if n in self.nodes]  # a node gone has no labels left to say where it was
        anchors = held or [w[3] for w in wants if w[3] in self.nodes]
        if not anchors:
            return everywhere
        homes = Counter(home_of(n) for n in anchors)
        home = max(homes, key=lambda d: homes[d])  # ties: the first named
        inside = [n for n in usable if home_of(n.name) == home]
        scoped = [(s, r, sel, h if h in self.nodes and home_of(h) == home else None) for s, r, sel, h in wants]
        if held:
            return [(inside, scoped)]
        return [(inside, scoped), (list(usable), [(s, r, sel, None) for s, r, sel, _ in wants])]

    def fit(
        self,
        kind: CapacityType,
        usable: Sequence[NodeInfo],
        scope: Sequence[NodeInfo],
        wants: Sequence[Want],
        free: dict[str, Resources],
        packing: Packing | None,
        prefer: Mapping[str, int] | None,
    ) -> tuple[bool, dict[Slot, str], Resources]:
        """:meth:`place` on the nodes of ``scope`` (spends ``free``): whether all fit with what
        ``usable`` keeps for the pods owed, where each went, and what is owed then."""
        names = {n.name for n in scope}
        where: dict[Slot, str] = {}
        rest: list[Want] = []
        for want in wants:
            slot, requests, selector, hint = want
            if (
                hint in names
                and selector.allows(self.nodes[hint].labels, self.nodes[hint].taints)
                and fits(free[hint], requests)
            ):
                subtract(free[hint], requests)
                where[slot] = hint
            else:
                rest.append(want)
        sites = [Site(n.name, n.labels, n.taints) for n in scope]
        level = packing.level if packing else None
        mode: PackingMode = packing.mode if packing else "Preferred"
        packed = pack(sites, free, [PackWant(w[0], w[1], w[2]) for w in rest], self.levels, level, mode, prefer)
        where |= packed.where
        unplaced = [w for w in rest if w[0] not in packed.where]
        left = [w[1] for w in unplaced] if mode == "Required" else self.best_fit(scope, free, unplaced, where)
        pool = total((free[n.name], 1) for n in usable)
        debt = total([(d, 1) for d in left] + [(self.debt.get(kind, {}), 1)])
        return not left and fits(pool, debt), where, debt

    def best_fit(
        self, usable: Sequence[NodeInfo], free: dict[str, Resources], wants: Sequence[Want], where: dict[Slot, str]
    ) -> list[Resources]:
        """Each replica on the fullest node that holds it, the largest first (spends ``free``, fills
        ``where``); returns the requests of those no node holds."""
        left: list[Resources] = []
        biggest_first = sorted(wants, key=lambda w: w[0])
        biggest_first.sort(key=lambda w: sorted(w[1].items()), reverse=True)  # stable: index order kept
        for slot, requests, selector, _ in biggest_first:
            candidates = [n for n in usable if selector.allows(n.labels, n.taints) and fits(free[n.name], requests)]
            if not candidates:
                left.append(requests)
                continue
            best = min(candidates, key=lambda n: (*(free[n.name].get(r, Decimal(0)) for r in ROOM_ORDER), n.name))
            subtract(free[best.name], requests)
            where[slot] = best.name
        return left

    def take(self, node: str, kind: CapacityType, requests: Resources, selector: Selector) -> bool:
        """Reserve room for one pod on ``node`` if it is a usable node of ``kind`` and has it."""
        n = self.nodes.get(node)
        if n is None or n.kind != kind or not n.schedulable or not fits(self.free[node], requests):
            return False
        if not selector.allows(n.labels, n.taints):
            return False
        subtract(self.free[node], requests)
        return True

    def owe(self, kind: CapacityType, requests: Resources) -> None:
        """An admitted pod no node has room for now: later admissions must leave room for it."""
        self.debt[kind] = total([(self.debt.get(kind, {}), 1), (requests, 1)])

    def credit(self, node: str, requests: Resources) -> None:
        if node in self.free:
            subtract(self.free[node], {k: -v for k, v in requests.items()})

    def within_budget(self, policy: PolicyInfo, namespace: str, kind: CapacityType, want: Resources) -> bool:
        limits = budget(policy, kind)
        spent = self.spent.get((namespace, kind), {})
        return all(spent.get(n, Decimal(0)) + want.get(n, Decimal(0)) <= limit for n, limit in limits.items())

    def spend(self, namespace: str, kind: CapacityType, reserved: Resources) -> None:
        into = self.spent.setdefault((namespace, kind), {})
        for name, amount in reserved.items():
            into[name] = into.get(name, Decimal(0)) + amount


@dataclass(frozen=True)
class Shape:
    """A Trainer's pods under one option: what each role's pod asks and where it may go."""

    counts: Mapping[Role, int]
    requests: Mapping[Role, Resources]
    selectors: Mapping[Role, Selector]
    packing: Packing | None = None  # spec.scheduling.packing

    @property
    def reserved(self) -> Resources:
        return total((self.requests[r], n) for r, n in self.counts.items())

    def slots(self) -> list[Slot]:
        return [(r, i) for r, n in self.counts.items() for i in range(n)]

    def wants(self, bound: Mapping[Slot, str], hints: Mapping[Slot, str]) -> list[Want]:
        """The replicas without a pod on a node yet."""
        return [(s, self.requests[s[0]], self.selectors[s[0]], hints.get(s)) for s in self.slots() if s not in bound]


def extended_resources(requests: Resources) -> frozenset[str]:
    """The extended resources among a pod's requests (a domain-prefixed name: nvidia.com/gpu)."""
    return frozenset(r for r in requests if "/" in r and not r.startswith("kubernetes.io/"))


def role_selector(t: TrainerInfo, role: Role, requests: Resources) -> Selector:
    """Where the role's pods may go (taints.py): the node labels they select, and the tolerations
    they will have — the profile's, the role's override's, the namespace's defaults and the spot
    ones the quota adds on spot capacity."""
    own = (role_override(t.spec, role) or {}).get("spec") or {}
    profile = t.profile
    labels = {**((profile.node_selector if profile else None) or {}), **(own.get("nodeSelector") or {})}
    contributed = [tol.to_k8s() for tol in (profile.tolerations if profile else None) or ()]
    tolerations = tolerations_of([*contributed, *(own.get("tolerations") or ()), *SPOT_TOLERATIONS])
    return Selector(labels, tolerations + t.namespace_tolerations, extended_resources(requests))


def shape(t: TrainerInfo, workers: int, resources: ResourceRequirements | None) -> Shape:
    counts = role_counts(t.spec, workers)

    roles = [r for r, n in counts.items() if n]
    requests = {r: role_requests(t.spec, r, t.profile, resources) for r in roles}
    return Shape(
        counts={r: counts[r] for r in roles},
        requests=requests,
        selectors={r: role_selector(t, r, requests[r]) for r in roles},
        packing=(t.spec.scheduling.packing if t.spec.scheduling else None) or t.profile_packing,
    )


def invalid(t: TrainerInfo) -> str | None:
    """Why the run's pods cannot be sized (a malformed quantity, or resource claims, in an override), if so."""
    try:
        shape(t, worker_bounds(t.spec)[1], None)
    except ValueError as err:
        return f"cannot size the run's pods: {err}; fix spec.resources or spec.podTemplateOverrides"
    return None


def options(t: TrainerInfo, policy: PolicyInfo, kinds: Sequence[CapacityType]) -> list[Option]:
    """Every admissible option, best first: capacity order, then full-size pods, then most workers."""
    lo, hi = worker_bounds(t.spec)
    adjust = policy.spec.adjustment
    percents = [100] + (
        sorted({p for p in (75, 50, 25, adjust.min_percent) if p >= adjust.min_percent}, reverse=True) if adjust else []
    )
    out = []
    for kind in kinds:
        for percent in percents:
            resources = adjusted(t.spec, t.profile, adjust.resources, percent) if adjust else None
            if percent < 100 and resources is None:
                continue  # nothing to lower
            for workers in range(hi, lo - 1, -1):
                out.append(Option(kind, workers, resources, percent))
    return out


def hints_of(grant: Grant | None) -> dict[Slot, str]:
    out: dict[Slot, str] = {}
    placed = (grant.placement if grant else None) or {}
    for role in ROLES:
        for i, node in enumerate(placed.get(role, ())):
            if node:
                out[(role, i)] = node
    return out
