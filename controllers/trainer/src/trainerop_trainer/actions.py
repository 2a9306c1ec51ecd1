"""Carrying out the trainer's decisions with the controller's own client: the pods' identity,
claims and the Service, then pods, then deletions (a replacement can only be created once its
predecessor is gone), each step's requests concurrently."""

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from lightkube import ApiError
from prometheus_client import Counter

from trainerop_common.contracts import REPLICA_TYPE_LABEL
from trainerop_common.kube import is_namespace_terminating
from trainerop_common.objects import holds
from trainerop_common.parallel import bounded, first_error, settled
from trainerop_common.runtime import Body, Runtime

from .decide import Decision
from .guard import LOWERED_ANNOTATION, GuardChange
from .pods import Owner
from .views import PodView

PODS_CREATED = Counter("trainer_pods_created_total", "Training pods created.", ["role"])
# How long a created pod the watch has not delivered counts as existing (a watch delivers it in
# well under a second; past this the next reconcile trusts the cache again).
EXPECTATION_TIMEOUT = timedelta(seconds=30)
# How long a namespace the API server said is being deleted is left alone before one create is
# tried there again (a namespace of that name may be made anew once the old one is gone).
TERMINATING_RECHECK = timedelta(seconds=30)


@dataclass(frozen=True)
class Carried:
    refused: bool  # the API server refused a create (an Event said why): retry with backoff
    pods_created: bool  # every pod the decision asked for was created now


@dataclass(frozen=True)
class Expected:
    owner_uid: str
    pod: dict[str, Any]
    until: datetime


log = logging.getLogger("trainerop.trainer")
SERVICE_NEED = "whose pods' DNS names need a Service of that name"
GUARD_NEED = "whose drain guard (a drain waits for the run to save) needs a PodDisruptionBudget of that name"
RESTARTS = Counter("trainer_worker_restarts_total", "Pods replaced after a retryable failure.", ["role"])


# The namespace-wide objects applied once per namespace: the pods' identity (with the first pods
# there) and the Secret grants of the gates' controllers (with the first Trainer there).
RUNNER, GRANTS = "runner", "grants"
REFUSALS = (403, 409, 422)  # forbidden (RBAC, the admission policy), another's object, invalid: not retried


class Actions:
    def __init__(self, runtime: Runtime, grants: Callable[[str], list[dict[str, Any]]] = lambda _: []) -> None:
        self.rt = runtime
        self.grants = grants  # namespace -> the RoleBindings giving the gates' controllers its Secrets
        # UIDs of pods this process deleted, with their (namespace, name): treated as going away
        # until the watch says so, so a stale event cannot make one failure count twice.
        self.deleted: dict[str, tuple[str, str]] = {}
        # Of those, the ones the API server removed on the delete itself (a Failed pod has no grace
        # period): treated as gone at once, so a replacement is created without waiting for the
        # watch to deliver the deletion (behind every other event of a busy cluster).
        self.removed: set[str] = set()
        # Pods this process created that the watch has not delivered yet, by their Trainer
        # (namespace, name) and name: counted as existing, so a reconcile in between creates none
        # twice. Grouped, so a reconcile reads its own, not every Trainer's.
        self.expected: dict[tuple[str, str], dict[str, Expected]] = {}
        self._swept = self.rt.clock.now()  # when expectations of every Trainer were last checked
        # (runner or grants, namespace) -> when this process applied them there
        self._applied: dict[tuple[str, str], datetime] = {}
        self._apply_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._terminating: dict[str, datetime] = {}  # namespace -> when a create there was refused as it goes

    def namespace_going(self, namespace: str) -> bool:
        """The API server refused a create in ``namespace`` lately because it is being deleted: its
        Trainers go with it, so nothing is created there and no status is written (deleting a
        namespace of 1000 Trainers would otherwise re-create every pod the namespace controller
        deletes, each refused, and rewrite every Trainer's status as its pods go)."""
        since = self._terminating.get(namespace)
        if since is not None and self.rt.clock.now() - since >= TERMINATING_RECHECK:
            del self._terminating[namespace]
            return False
        return since is not None

    def _refused_as_going(self, namespace: str, err: ApiError) -> bool:
        if is_namespace_terminating(err):
            self._terminating[namespace] = self.rt.clock.now()
            return True
        return False

    async def carry_out(self, body: Body, owner: Owner, decision: Decision, pods: Sequence[PodView]) -> Carried:
        """Create and delete what the decision says, except the failed pods it replaces (and their
        gang): those go in :meth:`replace_failed`, once the status that counts their failure is
        written. Whether the API server refused something (an Event said what; the rest was
        carried out), and whether every pod asked for was created."""
        await self._grant(owner.namespace)
        await self._once((RUNNER, owner.namespace), decision.runner)
        made = await bounded(
            [*(self._create(body, obj) for obj in decision.create_claims)]
            + [self._create_named(body, owner, obj, SERVICE_NEED) for obj in decision.create_services]
            + ([self._guard(body, owner, decision.guard)] if decision.guard else [])
        )
        pods_made = await self._create_pods(body, owner, decision.create_pods)
        force = set(decision.force_delete)
        now = sorted((set(decision.delete_pods) | force) - set(decision.restarted))
        await self._delete_pods(owner, now, force, {p.name: p for p in pods})
        await self._delete_others(owner, decision)
        return Carried(refused=None in (*made, *pods_made), pods_created=all(pods_made))

    async def replace_failed(self, owner: Owner, decision: Decision, pods: Sequence[PodView]) -> None:
        """Delete the pods a restart replaces, after the status write that counts the failure: a
        controller killed in between finds the failure counted (``countedFailures``) and the pod
        still there, and deletes it without counting it again; killed before the write, it finds
        the failure uncounted and counts it. Either way it is counted exactly once."""
        force = set(decision.force_delete)
        removed = await self._delete_pods(owner, sorted(decision.restarted), force, {p.name: p for p in pods})
        for name in decision.restarted:
            RESTARTS.labels(next((p.role for p in pods if p.name == name), "unknown")).inc()
        if removed:  # their replacements need no event: the next reconcile at once
            self.rt.requeue([(owner.namespace, owner.name)])

    async def _create_pods(self, body: Body, owner: Owner, pods: Sequence[dict[str, Any]]) -> list[bool | None]:
        """Create the pods together (for each: created, existed already, or refused). Each one
        created is expected until the watch delivers it; one that existed is not (it may be a
        predecessor still terminating, or someone else's). The expectations are raised before the
        requests: the watch may deliver a pod (and its deletion by someone else) before its
        create's answer comes, and an expectation raised after that would hide the loss."""
        group = self.expected.setdefault((owner.namespace, owner.name), {})
        until = self.rt.clock.now() + EXPECTATION_TIMEOUT
        group.update({pod["metadata"]["name"]: Expected(owner.uid, pod, until) for pod in pods})
        outcomes = await settled(self._create(body, pod) for pod in pods)
        created = [pod for pod, outcome in zip(pods, outcomes, strict=True) if outcome is True]
        for pod, outcome in zip(pods, outcomes, strict=True):
            if outcome is not True:  # not made by this request: nothing to wait for
                self._lower((owner.namespace, owner.name), pod["metadata"]["name"])
        for pod in created:
            PODS_CREATED.labels(pod["metadata"]["labels"][REPLICA_TYPE_LABEL]).inc()
        if created:
            self.rt.event(body, "Normal", "CreatedPods", "created " + ", ".join(p["metadata"]["name"] for p in created))
        first_error(outcomes)  # an API server error (5xx) for one: retried, the others expected meanwhile
        made = [o for o in outcomes if not isinstance(o, Exception)]
        if None in made:  # e.g. the runner ServiceAccount was deleted: apply it again next time
            self._applied.pop((RUNNER, owner.namespace), None)
        return made

    async def _create_named(self, body: Body, owner: Owner, obj: dict[str, Any], need: str) -> bool | None:
        """An object named like the Trainer (its headless Service, its drain guard); one of that
        name that is not this Trainer's (a user's) is refused, with an Event that says what it is
        ``need``ed for and what to do."""
        made = await self._create(body, obj)
        if made is not False or self.namespace_going(owner.namespace):
            return made
        kind, name = obj["kind"], obj["metadata"]["name"]
        existing = await self.rt.kube.get_core(kind, owner.namespace, name)
        refs = ((existing or {}).get("metadata") or {}).get("ownerReferences") or ()
        if existing is None or any(ref.get("uid") == owner.uid for ref in refs):
            return False  # ours, not delivered by the watch yet (or gone meanwhile)
        message = f"{kind} {name} exists and does not belong to this Trainer, {need}: rename or delete that {kind}"
        self.rt.event(body, "Warning", "CreateRefused", message)
        return None

    async def _guard(self, body: Body, owner: Owner, change: GuardChange) -> bool | None:
        """The drain guard (guard.py) created, or its size set."""
        if change.manifest is not None:
            return await self._create_named(body, owner, change.manifest, GUARD_NEED)
        lowered = {"annotations": {LOWERED_ANNOTATION: change.lowered_at}}  # None: the annotation goes
        patch = {"metadata": lowered, "spec": {"minAvailable": change.resize}}
        await self.rt.kube.merge_patch("PodDisruptionBudget", owner.namespace, owner.name, patch)
        return True

    async def _grant(self, namespace: str) -> None:
        """The gates' controllers may read the Secrets of this namespace's Trainers. A refusal
        (an install without the trainer's bind right) does not hold the Trainer back: it is
        logged, tried again after --resync-seconds, and the controllers say they cannot read the
        Secret."""
        if not self._due((GRANTS, namespace)):  # every reconcile passes here: build nothing then
            return
        try:
            await self._once((GRANTS, namespace), self.grants(namespace))
        except ApiError as err:
            if err.status.code not in REFUSALS:
                raise  # the API server busy or failing: the reconcile is retried with backoff
            log.error(
                "cannot let the gates' controllers read Secrets in namespace %s (RoleBindings %s): %s; the trainer "
                "controller needs the RBAC and admission policy of deploy/controllers/trainer/rbac",
                namespace,
                ", ".join(o["metadata"]["name"] for o in self.grants(namespace)),
                err.status.message,
            )
            self._applied[(GRANTS, namespace)] = self.rt.clock.now()  # not again before the next resync

    async def _once(self, key: tuple[str, str], objects: Sequence[dict[str, Any]]) -> None:
        """Namespace-wide objects (the pods' ServiceAccount, Role and RoleBinding; the Secret
        grants): checked by this process once per namespace, not per Trainer, and again when
        needed there more than --resync-seconds later, each read first and applied (server-side
        apply) only when it is missing or says less than it should (one deleted or edited by hand
        comes back; a resync of a cluster that is as it should be writes nothing); the Trainers of
        a namespace reconciled together wait for one check."""
        namespace = key[1]
        if not objects or not self._due(key):
            return
        async with self._apply_locks.setdefault(key, asyncio.Lock()):
            if self._due(key) and not self.namespace_going(namespace):
                try:
                    for obj in objects:
                        await self._apply_unless_held(obj)
                except ApiError as err:
                    if not self._refused_as_going(namespace, err):
                        raise
                    return
                self._applied[key] = self.rt.clock.now()

    async def _apply_unless_held(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        live = await self.rt.kube.get_core(obj["kind"], meta["namespace"], meta["name"])
        if live is None or not holds(live, obj):
            await self.rt.kube.apply_core(obj)

    def _due(self, key: tuple[str, str]) -> bool:
        applied = self._applied.get(key)
        return applied is None or self.rt.clock.now() - applied >= timedelta(seconds=self.rt.config.resync_seconds)

    async def _create(self, body: Body, obj: dict[str, Any]) -> bool | None:
        """Create one object: whether it was created (False: it exists, or its namespace is going
        and the Trainer with it), None when the API server refused it (quota, admission, an
        invalid override): an Event says why, and the reconcile is retried with backoff."""
        namespace = obj["metadata"].get("namespace", "")
        if self.namespace_going(namespace):
            return False
        try:
            return await self.rt.kube.create_core(obj)
        except ApiError as err:
            if err.status.code is not None and err.status.code >= 500:
                raise
            if self._refused_as_going(namespace, err):
                return False
            kind, name = obj["kind"], obj["metadata"]["name"]
            self.rt.event(body, "Warning", "CreateRefused", f"{kind} {name} was refused: {err.status.message}")
            return None

    async def _delete_pods(
        self, owner: Owner, names: Sequence[str], force: Set[str], pods: Mapping[str, PodView]
    ) -> bool:
        """Delete the pods ``names``, those in ``force`` without waiting for their lost node;
        whether the API server removed any of them on the spot (:attr:`removed`)."""
        # Each by the UID decided on: a replacement made since under its name is not deleted with it.
        uids = {n: pods[n].uid or None for n in names if n in pods}
        kube = self.rt.kube
        done = await bounded(
            kube.delete_core("Pod", owner.namespace, n, force=n in force, uid=uids.get(n)) for n in names
        )
        # gone already (404) counts as deleted too: never count it twice
        self.deleted.update({uid: (owner.namespace, n) for n, uid in uids.items() if uid})
        removed = {u for n, how in zip(names, done, strict=True) if how == "removed" and (u := uids.get(n))}
        self.removed |= removed
        for name in names:  # a pod deleted before the watch delivered it is no longer expected
            self.delivered((owner.namespace, name), owner.name)
        return bool(removed)

    async def _delete_others(self, owner: Owner, decision: Decision) -> None:
        kube, ns = self.rt.kube, owner.namespace
        others = [("Service", name) for name in decision.delete_services] + [
            ("Lease", name) for name in decision.delete_leases
        ]
        await bounded(kube.delete_core(kind, ns, name) for kind, name in others)

    def delivered(self, key: tuple[str, str], trainer: str) -> None:
        """The watch delivered an event of the pod ``key`` (namespace, name) of the Trainer
        ``trainer``: it is no longer expected, even if it is gone again before the next reconcile
        looks (deleted by someone else right after its creation: that reconcile must create it
        again, not wait it out)."""
        self._lower((key[0], trainer), key[1])

    def _lower(self, trainer: tuple[str, str], name: str) -> None:
        """Drop the expectation of the pod ``name`` (one reconcile of a Trainer at a time raises them)."""
        group = self.expected.get(trainer)
        if group is None or group.pop(name, None) is None or group:
            return
        del self.expected[trainer]

    def expected_pods(self, owner: Owner, cached: Set[str]) -> list[dict[str, Any]]:
        """The manifests of ``owner``'s pods created but not among the ``cached`` names yet;
        expectations met (the pod is cached) or past EXPECTATION_TIMEOUT are forgotten (those of
        every Trainer once per EXPECTATION_TIMEOUT, for Trainers never reconciled again)."""
        now = self.rt.clock.now()
        if now - self._swept > EXPECTATION_TIMEOUT:
            self._swept = now
            for trainer in list(self.expected):
                self._forget(trainer, now, frozenset())
        group = self._forget((owner.namespace, owner.name), now, cached)
        return [e.pod for e in group.values() if e.owner_uid == owner.uid]

    def next_lapse(self, owner: Owner) -> float | None:
        """Seconds until the first of ``owner``'s open expectations lapses, None without any: a
        reconcile is due then (a pod the watch never delivered is trusted gone), whatever other
        timer the Trainer has."""
        group = self.expected.get((owner.namespace, owner.name))
        if not group:
            return None
        return max(0.0, (min(e.until for e in group.values()) - self.rt.clock.now()).total_seconds())

    def _forget(self, trainer: tuple[str, str], now: datetime, cached: Set[str]) -> dict[str, Expected]:
        """The Trainer's expectations still open: those met (``cached``) or lapsed are dropped."""
        group = self.expected.get(trainer, {})
        for name in [n for n, e in group.items() if e.until < now or n in cached]:
            del group[name]
        if not group:
            self.expected.pop(trainer, None)
        return group

    def forget_gone(self, uid_at: Callable[[tuple[str, str]], str | None]) -> None:
        """Forget deletions whose pods are gone: ``uid_at`` gives the UID of the pod held under a
        (namespace, name), None without one. Only the deleted pods' names are looked up, not every
        pod (a replacement under the same name has another UID: the deleted one is gone)."""
        gone = {uid for uid, key in self.deleted.items() if uid_at(key) != uid}
        for uid in gone:
            del self.deleted[uid]
        self.removed -= gone
