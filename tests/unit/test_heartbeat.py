"""Progress heartbeats: the SDK's request, and what the trainer makes of them."""

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import get_args

import pytest
import yaml

from tests.factories import trainer_spec
from tests.harness import REPO
from trainerop_common.api.trainer import TrainerStatus
from trainerop_common.names import MANAGED_BY
from trainerop_common.topology import Role
from trainerop_sdk.heartbeat import Fenced, Heartbeat, HeartbeatError, ReplicaIdentity, micro_time
from trainerop_sdk.kubeapi import ApiClient, ApiError
from trainerop_trainer.decide import LeaseView, Observed, PodView, decide
from trainerop_trainer.pods import Owner, PodSettings, labels, pod_manifest, runner_manifests
from trainerop_trainer.report import progress
from trainerop_trainer.topology import Replica
from trainerop_trainer.views import lease_view

from .test_decide_trainer import GATES, OPEN

NOW = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)


G = "trainer.operator.kubeflow.org"


def test_the_sdk_renews_the_lease_and_records_epoch_and_step() -> None:
    beat = Heartbeat("https://k8s", "token", "ns", "llama-worker-0", clock=lambda: NOW)
    assert beat.patch_body(beat.report(3, 1200)) == {
        "metadata": {
            "annotations": {
                f"{G}/epoch": "3",
                f"{G}/step": "1200",
                # what this beat does not know goes: a pace an earlier process of the pod measured
                f"{G}/total-steps": None,
                f"{G}/seconds-per-step": None,
                f"{G}/seconds-per-epoch": None,
                f"{G}/metrics": None,
            }
        },
        "spec": {"renewTime": "2026-01-01T00:10:00.000000Z"},
    }
    assert micro_time(NOW) == "2026-01-01T00:10:00.000000Z"


def test_the_sdk_measures_its_pace_from_its_first_beat_and_reports_metrics() -> None:
    times = iter([NOW, NOW + timedelta(seconds=100), NOW + timedelta(seconds=300), NOW + timedelta(seconds=310)])
    beat = Heartbeat("https://k8s", "token", "ns", "llama-worker-0", clock=lambda: next(times))
    first = beat.report(1, 100, total_steps=1000, metrics={"loss": 0.123456789, "tokens_per_s": 1200})
    assert (first[f"{G}/seconds-per-step"], first[f"{G}/total-steps"]) == (None, "1000")  # nothing measured yet
    assert first[f"{G}/metrics"] == '{"loss":0.123457,"tokens_per_s":1200.0}'
    second = beat.report(2, 200, total_steps=1000)
    assert (second[f"{G}/seconds-per-step"], second[f"{G}/seconds-per-epoch"]) == ("1", "100")
    assert second[f"{G}/metrics"] is None
    third = beat.report(3, 300)  # 300 s for 200 steps and 2 epochs since the first beat
    assert (third[f"{G}/seconds-per-step"], third[f"{G}/seconds-per-epoch"]) == ("1.5", "150")
    resumed = beat.report(1, 100)  # back to an earlier checkpoint: measured again from here
    assert resumed[f"{G}/seconds-per-step"] is None


@pytest.mark.parametrize(
    ("metrics", "total", "complaint"),
    [
        ({f"m{i}": 1.0 for i in range(9)}, None, "at most 8 metrics"),
        ({"a loss": 1.0}, None, "metric name 'a loss'"),
        ({"loss": float("nan")}, None, "metric loss is nan"),
        ({}, 0, "total_steps must be at least 1"),
    ],
)
def test_the_sdk_refuses_what_it_cannot_report(metrics: dict[str, float], total: int | None, complaint: str) -> None:
    beat = Heartbeat("https://k8s", "token", "ns", "llama-worker-0", clock=lambda: NOW)
    with pytest.raises(ValueError, match=complaint):
        beat.report(1, 1, total_steps=total, metrics=metrics)


def test_pods_run_as_their_namespaces_runner_which_may_create_and_renew_leases() -> None:
    owner = Owner("llama", "ns", "uid", 1)
    spec = trainer_spec(epochs=1, image="i", topology={"workers": 2})
    pod = pod_manifest(owner, spec, Replica("worker", 0), {}, PodSettings())
    assert pod["spec"]["serviceAccountName"] == "trainer-operator-runner"
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    sa, role, binding = runner_manifests("ns")
    assert {o["metadata"]["name"] for o in (sa, role, binding)} == {"trainer-operator-runner"}
    assert all("ownerReferences" not in o["metadata"] for o in (sa, role, binding))  # it stays with the namespace
    leases, checkpoints = role["rules"]
    # No names: a pod's Lease is made by its first beat; the admission policy
    # trainer-operator-checkpoint-reporters holds each pod to the Lease named like it.
    assert leases == {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["create", "patch"],  # the SDK never reads one; reads are not what the policy sees
    }
    assert checkpoints == {
        "apiGroups": ["trainer.operator.kubeflow.org"],
        "resources": ["checkpoints"],
        "verbs": ["get", "create", "patch"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "trainer-operator-runner", "namespace": "ns"}]


def test_the_first_beat_creates_the_lease_the_trainer_reads_from_the_pods_env() -> None:
    owner = Owner("llama", "ns", "uid-1", 1)
    spec = trainer_spec(epochs=1, image="i", topology={"workers": 2})
    pod = pod_manifest(owner, spec, Replica("worker", 1), {}, PodSettings())
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"] if "value" in e}
    replica = ReplicaIdentity.from_env(env)
    assert replica == ReplicaIdentity("llama", "uid-1", "worker", "1")
    beat = Heartbeat("https://k8s", "token", "ns", "llama-worker-1", clock=lambda: NOW, replica=replica)
    lease = beat.lease_body(replica, beat.report(2, 40))
    assert lease["metadata"] == {
        "name": "llama-worker-1",
        # what the trainer's cache selects and indexes by (the managed-by label marks what it creates)
        "labels": {k: v for k, v in labels(owner, Replica("worker", 1)).items() if k not in MANAGED_BY},
        "annotations": {f"{G}/epoch": "2", f"{G}/step": "40"},  # none of the unknowns
        "ownerReferences": [
            {"apiVersion": "trainer.operator.kubeflow.org/v1alpha1", "kind": "Trainer", "name": "llama", "uid": "uid-1"}
        ],
    }
    assert lease["spec"] == {"holderIdentity": "llama-worker-1", "renewTime": "2026-01-01T00:10:00.000000Z"}
    assert ReplicaIdentity.from_env({k: v for k, v in env.items() if k != "TRAINER_UID"}) is None  # then it must exist


def observe(stall: int | None, leases: dict[str, LeaseView], started: str = "2026-01-01T00:00:00Z") -> Observed:
    run_policy = {"stallTimeoutSeconds": stall} if stall else {}
    spec = trainer_spec(epochs=5, image="i", topology={"workers": 2}, runPolicy=run_policy)
    pods = [PodView(f"t-worker-{i}", f"u{i}", "worker", i, "Running", True, started=started) for i in range(2)]
    return Observed(
        owner=Owner("t", "ns", "uid", 1),
        spec=spec,
        status=TrainerStatus(),
        conditions=OPEN,
        gates=GATES,
        now=NOW,
        pods=pods,
        services=frozenset(p.name for p in pods),
        leases=leases,
    )


def test_progress_is_the_furthest_heartbeat() -> None:
    leases = {
        "t-worker-0": LeaseView("t-worker-0", "2026-01-01T00:09:58.123456Z", 3, 1200),
        "t-worker-1": LeaseView("t-worker-1", "2026-01-01T00:09:59.000000Z", 2, 1100),
    }
    progress = decide(observe(None, leases)).status["progress"]
    assert (progress["epoch"], progress["step"], progress["lastHeartbeatTime"]) == (3, 1200, "2026-01-01T00:09:59Z")


def beat(epoch: int, step: int, ago: int = 0, **kw: object) -> LeaseView:
    renewed = NOW - timedelta(seconds=ago)
    return LeaseView("t-worker-0", renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), epoch, step, **kw)  # type: ignore[arg-type]


# Percent done and the estimated completion (spec.epochs 5; now is 00:10:00): from the steps when a
# heartbeat gives the total, else from the epochs; the ETA is the furthest beat's time plus what
# remains at its pod's pace, and only while the run is on.
PROGRESS_TABLE: list[tuple[str, LeaseView | None, str, int, str | None]] = [
    ("no heartbeat yet", None, "Running", 0, None),
    ("epochs only, no pace yet", beat(2, 0), "Running", 40, None),
    ("epochs at 60 s each", beat(2, 0, ago=10, seconds_per_epoch=60.0), "Running", 40, "2026-01-01T00:12:50Z"),
    (
        "steps of a known total, 0.5 s each",
        beat(1, 300, total_steps=1000, seconds_per_step=0.5, seconds_per_epoch=99.0),
        "Running",
        30,
        "2026-01-01T00:15:50Z",
    ),
    (
        "every step reported, not finished yet",
        beat(5, 1000, total_steps=1000, seconds_per_step=0.5),
        "Running",
        99,
        "2026-01-01T00:10:00Z",
    ),
    ("restarting keeps the estimate", beat(2, 0, seconds_per_epoch=60.0), "Restarting", 40, "2026-01-01T00:13:00Z"),
    ("succeeded", beat(5, 0, seconds_per_epoch=60.0), "Succeeded", 100, None),
    ("failed halfway", beat(2, 0, seconds_per_epoch=60.0), "Failed", 40, None),
    (
        "a pace that says never",
        beat(1, 0, seconds_per_epoch=1e300),
        "Running",
        20,
        "2035-12-30T00:10:00Z",
    ),  # 3650 days on
]


@pytest.mark.parametrize(
    ("lease", "phase", "percent", "eta"), [r[1:] for r in PROGRESS_TABLE], ids=[r[0] for r in PROGRESS_TABLE]
)
def test_percent_done_and_the_estimated_completion(
    lease: LeaseView | None, phase: str, percent: int, eta: str | None
) -> None:
    done = progress(None, {"t-worker-0": lease} if lease else {}, "2026-01-01T00:00:00Z", None, 5, phase)  # type: ignore[arg-type]
    assert (done.percent, done.estimated_completion_time) == (percent, eta)


def test_the_latest_metrics_are_kept_and_what_leases_said_stays_when_they_go() -> None:
    leases = {
        "t-worker-0": beat(2, 200, metrics=(("loss", "0.5"), ("tokens_per_s", "900"))),
        "t-worker-1": beat(2, 210, metrics=(("loss", "0.4"),)),  # further: its loss is the latest
    }
    now = progress(None, leases, None, None, 5, "Running")
    assert now.metrics == {"loss": "0.4", "tokens_per_s": "900"}
    later = progress(now, {}, None, None, 5, "Running")  # the Leases went (a scale-down)
    assert (later.epoch, later.step, later.metrics) == (2, 210, {"loss": "0.4", "tokens_per_s": "900"})


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, (0, 0, None, None, ())),
        (
            {"total-steps": "1000", "seconds-per-step": "0.25", "seconds-per-epoch": "25", "metrics": '{"loss":0.1}'},
            (1000, 0, 0.25, 25.0, (("loss", "0.1"),)),
        ),
        # A pod writes what it likes in its own Lease: only what parses counts.
        (
            {"total-steps": "-5", "seconds-per-step": "nan", "seconds-per-epoch": "-1", "metrics": "[1, 2]"},
            (0, 0, None, None, ()),
        ),
        (
            {"step": "9" * 40, "metrics": '{"loss": "low", "ok": 1, "bad name": 2, "flag": true}'},
            (0, 0, None, None, (("ok", "1"),)),
        ),
        ({"metrics": '{"m": 1}' + " " * 2000}, (0, 0, None, None, ())),  # longer than any the SDK writes
    ],
)
def test_the_trainer_reads_only_what_parses_from_a_lease(
    annotations: dict[str, str], expected: tuple[object, ...]
) -> None:
    body = {"metadata": {"name": "p", "annotations": {f"{G}/{k}": v for k, v in annotations.items()}}, "spec": {}}
    view = lease_view(body)
    assert (view.total_steps, view.step, view.seconds_per_step, view.seconds_per_epoch, view.metrics) == expected


def test_a_silent_pod_is_stalled_and_restarted() -> None:
    leases = {
        "t-worker-0": LeaseView("t-worker-0", "2026-01-01T00:09:55Z", 1, 10),  # beat 5 s ago
        "t-worker-1": LeaseView("t-worker-1", "2026-01-01T00:08:00Z", 1, 9),  # silent for 2 min
    }
    d = decide(observe(60, leases))
    assert d.restarted == ("t-worker-1",)
    stalled = next(c for c in d.conditions if c.type == "Stalled")
    assert (stalled.status, stalled.reason) == ("True", "NoHeartbeat")
    assert "pod t-worker-1 sent no heartbeat for 60s" in stalled.message
    assert d.status["topology"]["replicas"]["worker"]["restarts"] == 1


def test_a_pod_that_never_beat_is_judged_from_its_start() -> None:
    d = decide(observe(60, {}, started="2026-01-01T00:09:30Z"))
    assert d.restarted == ()
    assert d.requeue_after == 30.0  # looks again when the first could stall


def test_the_runner_comes_with_the_pods() -> None:
    obs = observe(None, {})
    d = decide(Observed(**{**obs.__dict__, "pods": [], "services": frozenset()}))
    assert [p["metadata"]["name"] for p in d.create_pods] == ["t-worker-0", "t-worker-1"]
    assert [o["kind"] for o in d.runner] == ["ServiceAccount", "Role", "RoleBinding"]


def test_the_runner_policy_knows_every_role() -> None:
    """deploy/base/runner-policy.yaml tells a replica's pod name from another Trainer's by the
    roles: it must name exactly the roles a Trainer has."""
    policy = next(yaml.safe_load_all((REPO / "deploy" / "base" / "runner-policy.yaml").read_text()))
    rules = " ".join(v["expression"] for v in policy["spec"]["validations"])
    found = re.search(r"\^\(([a-z|]+)\)-\[0-9\]\+\$", rules)
    assert found is not None
    assert set(found.group(1).split("|")) == set(get_args(Role))


def test_a_heartbeat_whose_token_is_refused_fences_the_pod_unless_a_rotated_token_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    accepted = {"fresh"}
    sent: list[str] = []

    def beat(self: Heartbeat, api: ApiClient, annotations: dict[str, str | None], timeout: float) -> None:
        sent.append(api.token)
        if api.token == "forbidden":
            raise ApiError("PATCH refused: 403", 403)
        if api.token not in accepted:
            raise ApiError("PATCH refused: 401 Unauthorized", 401)

    monkeypatch.setattr(Heartbeat, "_beat", beat)
    token = tmp_path / "token"
    token.write_text("fresh\n")
    # The kubelet rotated the token: the fresh one is read and accepted.
    Heartbeat("https://k8s", "old", "ns", "t-worker-0", token_file=str(token)).send(1)
    assert sent == ["old", "fresh"]
    # Refused as freshly read: the pod object is gone and a replacement holds the rank.
    token.write_text("old\n")
    with pytest.raises(Fenced) as fenced:
        Heartbeat("https://k8s", "old", "ns", "t-worker-0", token_file=str(token)).send(1)
    assert isinstance(fenced.value, SystemExit)  # `except Exception` cannot keep the rank training
    assert fenced.value.code == 143
    assert "pod t-worker-0 was deleted" in str(fenced.value)
    with pytest.raises(HeartbeatError):  # any other refusal: training goes on, the beat is retried later
        Heartbeat("https://k8s", "forbidden", "ns", "t-worker-0").send(1)


def test_the_sdk_reports_the_steps_between_its_beats_and_reads_a_save_request_from_the_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = [
        {"metadata": {"annotations": {}}},
        {"metadata": {"annotations": {f"{G}/save-at-step": "140"}}},
        {"metadata": {"annotations": {f"{G}/save-at-step": "soon"}}},  # not a step: asks nothing
    ]
    sent: list[dict[str, str | None]] = []

    def beat(self: Heartbeat, api: ApiClient, annotations: dict[str, str | None], timeout: float) -> object:
        sent.append(annotations)
        return answers[len(sent) - 1]

    monkeypatch.setattr(Heartbeat, "_beat", beat)
    hb = Heartbeat("https://k8s", "token", "ns", "t-worker-0", clock=lambda: NOW)
    hb.send(1, step=100)
    assert f"{G}/steps-per-beat" not in sent[0]  # the first beat has no interval (and removes none)
    assert not hb.save_requested(140)
    hb.send(2, step=132)
    assert sent[1][f"{G}/steps-per-beat"] == "32"
    assert hb.save_requested(140)
    assert not hb.save_requested(139)
    assert not hb.save_requested(141)
    hb.send(3, step=164)
    assert not hb.save_requested(140)
