"""What the trainer's decision sees and says (pure): the :class:`Observed` world, the
:class:`Decision`, and :class:`Run`, the run as it stands now, which every stage of the decision
(:mod:`trainerop_trainer.decide`) decides on."""

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from trainerop_common.api import Contribution
from trainerop_common.api.base import Condition
from trainerop_common.api.trainer import Phase, TrainerSpec, TrainerStatus
from trainerop_common.clock import parse_time, rfc3339, whole_seconds
from trainerop_common.conditions import Desired, find
from trainerop_common.outcome import Event, StatusSection
from trainerop_common.pod_security import RESTRICTED
from trainerop_common.topology import effective

from .guard import GuardChange, GuardView
from .model import run_model
from .pods import Owner, PodSettings
from .policy import effective_run_policy, grant_of
from .report import progress, status_section
from .views import History, LeaseView, PodView, RestartBackoff, RoleHistory

CONDITIONS = ("Created", "Running", "Restarting", "Stalled", "Succeeded", "Failed", "Suspended", "ModelVerified")
SECTION = StatusSection(("phase", "reason", "message", "topology", "progress"), CONDITIONS)


@dataclass(frozen=True)
class Observed:
    owner: Owner
    spec: TrainerSpec
    status: TrainerStatus
    conditions: Sequence[Condition]
    gates: Sequence[str]  # condition types of the deployed concerns
    now: datetime
    pods: Sequence[PodView] = ()
    services: Set[str] = frozenset()
    contributions: Mapping[str, Contribution] = field(default_factory=dict)  # by concern
    settings: PodSettings = field(default_factory=PodSettings)
    backoff: RestartBackoff = field(default_factory=RestartBackoff)
    lost_nodes: Mapping[str, str] = field(default_factory=dict)  # node name -> why it counts as lost
    deleted_nodes: Set[str] = frozenset()  # of the lost nodes, those gone from the API
    # --force-delete-unreachable: a node that stops answering is known to be stopped (fenced by the
    # infrastructure), so its pods may be force-deleted and replaced at once.
    force_unreachable: bool = False
    leases: Mapping[str, LeaseView] = field(default_factory=dict)  # by pod name
    claims: Set[str] = frozenset()  # names of the replicas' PersistentVolumeClaims
    guard: GuardView | None = None  # the drain guard (guard.py; None: there is none)
    cordoned: Set[str] = frozenset()  # of the nodes under the run's pods, those cordoned (a drain)
    age: float | None = None  # seconds since the Trainer was created (None: unknown)
    gates_grace: float = 0.0  # --gates-grace-seconds
    pod_security: str = RESTRICTED  # the namespace's Pod Security level (trainerop_common.pod_security)


@dataclass(frozen=True)
class Decision:
    status: dict[str, Any]
    conditions: tuple[Desired, ...]
    create_pods: tuple[dict[str, Any], ...] = ()
    create_services: tuple[dict[str, Any], ...] = ()
    delete_pods: tuple[str, ...] = ()
    delete_services: tuple[str, ...] = ()
    restarted: tuple[str, ...] = ()  # pods deleted to be replaced after a retryable failure
    events: tuple[Event, ...] = ()
    on_change: tuple[Event, ...] = ()  # said only when the status this decision writes changes
    requeue_after: float | None = None  # seconds until something is due (backoff, deadline, TTL)
    delete_trainer: bool = False  # ttlSecondsAfterFinished has passed
    force_delete: tuple[str, ...] = ()  # pods on lost nodes: no kubelet will confirm their deletion
    create_claims: tuple[dict[str, Any], ...] = ()
    delete_leases: tuple[str, ...] = ()
    runner: tuple[dict[str, Any], ...] = ()  # the pods' identity in the namespace, for pods to create
    guard: GuardChange | None = None  # the drain guard to create or resize (guard.py)
    write_status: bool = True  # False: no status write yet (policy.unanswered_grace, policy.counts_hold)


@dataclass(frozen=True)
class Run:
    """The run as it stands now: what every stage decides on."""

    obs: Observed
    spec: TrainerSpec  # as admitted (the quota grant), with the concerns' run-policy defaults
    limit_from: str  # where the backoff limit comes from, for messages
    pods: tuple[PodView, ...]  # pods on lost nodes, and stalled ones, count as failed
    stalled: Mapping[str, str]  # pod -> why it counts as stalled
    stranded: frozenset[str]  # unfinished pods on lost nodes
    stuck: frozenset[str]  # pods being deleted on lost nodes (no kubelet will confirm it)
    history: dict[str, RoleHistory]  # each role's failures, from status
    start: str | None
    completion: str | None
    not_suspended: Desired

    @property
    def now(self) -> str:
        return rfc3339(self.obs.now)

    @property
    def live(self) -> list[PodView]:
        return [p for p in self.pods if not p.deleting]

    def uncounted(self, failed: Sequence[PodView]) -> list[PodView]:
        """Of ``failed``, the pods not in their role's restarts yet (an earlier write counted the
        others, and the controller stopped before it deleted them)."""
        return [p for p in failed if p.uid not in self.history.get(p.role, RoleHistory()).counted]

    def clean(self, candidates: Sequence[PodView]) -> tuple[str, ...]:
        """The pods cleanPodPolicy deletes when the run ends. It looks at what the pods really are:
        a stalled or stranded pod still holds its GPUs."""
        policy = self.spec.run_policy.clean_pod_policy
        finished = {p.name for p in self.obs.pods if p.finished}
        return tuple(
            sorted(p.name for p in candidates if policy == "All" or (policy == "Running" and p.name not in finished))
        )

    @property
    def forceable(self) -> frozenset[str]:
        """Pods on lost nodes that may be deleted without their kubelet's word: those of deleted
        nodes (someone said the machine is gone), and of silent ones only with
        --force-delete-unreachable. A silent node may be partitioned with its containers running:
        replacing its pod under the same name at once could run the rank twice."""
        obs = self.obs
        return frozenset(
            p.name
            for p in obs.pods
            if p.node in obs.lost_nodes and (obs.force_unreachable or p.node in obs.deleted_nodes)
        )

    def forced(self, doomed: Sequence[str]) -> tuple[str, ...]:
        """Of the pods deleted, those to delete without waiting for their lost node."""
        return tuple(sorted(((self.stranded | self.stuck) & set(doomed) | self.stuck) & self.forceable))

    def status(
        self, phase: Phase, pods: Sequence[PodView], start: str | None, end: str | None, history: History | None = None
    ) -> dict[str, Any]:
        now = progress(self.obs.status.progress, self.obs.leases, start, end, self.spec.epochs, phase)
        return status_section(  # desired: the replicas the run is admitted with
            self.obs.owner.name, self.spec, phase, pods, self.history if history is None else history, now
        )

    def due(self, since: str | None, seconds: float | None) -> float | None:
        """Seconds until ``since`` + ``seconds`` (<= 0: due now); None when either is unset."""
        if since is None or seconds is None:
            return None
        return (parse_time(since) + timedelta(seconds=seconds) - self.obs.now).total_seconds()


def next_due(*delays: float | None) -> float | None:
    """The next_due deadline still ahead (one due now is acted on by this reconcile)."""
    pending = [d for d in delays if d is not None and d > 0]
    return min(pending) if pending else None


def last_sign(obs: Observed, pod: PodView) -> str | None:
    """The later of the pod's start and its last heartbeat."""
    lease = obs.leases.get(pod.name)
    times = [whole_seconds(t) for t in (pod.started, lease.renew_time if lease else None) if t]
    return max(times) if times else None


def stalled_pods(obs: Observed, pods: Sequence[PodView]) -> dict[str, str]:
    """Running pods silent for longer than stallTimeoutSeconds -> why."""
    timeout = obs.spec.run_policy.stall_timeout_seconds
    if timeout is None:
        return {}
    out = {}
    for pod in pods:
        last = last_sign(obs, pod) if pod.phase == "Running" and not pod.deleting else None
        if last is not None and parse_time(last) + timedelta(seconds=timeout) <= obs.now:
            out[pod.name] = f"pod {pod.name} sent no heartbeat for {timeout}s (last sign of life {last})"
    return out


def assess(obs: Observed) -> Run:
    spec, limit_from = effective_run_policy(effective(obs.spec, grant_of(obs.contributions)), obs.contributions)
    model = run_model(obs.spec, obs.status)
    spec = spec if model is spec.model else spec.model_copy(update={"model": model})
    # A pod on a lost node is a failure without exit code (retryable, as an eviction is).
    # One already being deleted is only waiting for a kubelet that will never answer.
    stranded = frozenset(p.name for p in obs.pods if p.node in obs.lost_nodes and not p.finished and not p.deleting)
    stuck = frozenset(p.name for p in obs.pods if p.node in obs.lost_nodes and p.deleting)
    pods = [
        replace(p, phase="Failed", exit_code=None, reason="NodeLost") if p.name in stranded else p for p in obs.pods
    ]
    stalled = stalled_pods(obs, pods)
    pods = [replace(p, phase="Failed", exit_code=None, reason="Stalled") if p.name in stalled else p for p in pods]
    replicas = obs.status.topology.replicas if obs.status.topology and obs.status.topology.replicas else {}
    # A failed pod stays counted while it is there; once it is gone (or going) it is forgotten.
    failed_now = {p.uid for p in pods if p.phase == "Failed" and not p.deleting and p.uid}
    history = {
        r: RoleHistory(
            c.restarts, c.last_failure_time, c.recent_failures, frozenset(c.counted_failures or ()) & failed_now
        )
        for r, c in replicas.items()
    }
    was = find(obs.conditions, "Suspended")
    resumed = was is not None and (was.status == "True" or was.reason == "Resumed")
    not_suspended = (
        Desired.false("Suspended", "Resumed", "spec.runPolicy.suspend was set to false")
        if resumed
        else Desired.false("Suspended", "NotSuspended")
    )
    started = obs.status.progress
    return Run(
        obs,
        spec,
        limit_from,
        tuple(pods),
        stalled,
        stranded,
        stuck,
        history,
        started.start_time if started else None,
        started.completion_time if started else None,
        not_suspended,
    )
