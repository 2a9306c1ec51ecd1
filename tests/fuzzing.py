"""Generated Trainer, TrainingProfile and QuotaPolicy specs (hypothesis), good and bad alike, and
what the controllers' decisions make of those the API server accepts (issue 20).

Used by tests/integration/test_fuzz.py (a few hundred examples in CI) and bench/fuzz.py
(thousands). Values are drawn near the edges the schema and CEL draw (0, negative, huge, empty,
wrong types, unknown framework), so both acceptance and every kind of refusal are exercised."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

from trainerop_common.api import QuotaPolicy, Trainer, TrainingProfile
from trainerop_common.api.trainer import TrainerStatus
from trainerop_common.conditions import parse
from trainerop_profile.decide import FoundProfile
from trainerop_profile.decide import Observed as ProfileObserved
from trainerop_profile.decide import decide as profile_decide
from trainerop_quota.capacity import NodeInfo
from trainerop_quota.decide import Observed as QuotaObserved
from trainerop_quota.decide import PolicyInfo, plan
from trainerop_quota.views import trainer_info
from trainerop_trainer.decide import Observed, PodView, decide
from trainerop_trainer.pods import Owner
from trainerop_trainer.topology import replicas

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
STAMP = "2026-12-01T11:00:00Z"
GPU = "nvidia.com/gpu"

ints = st.one_of(st.integers(-2, 10), st.integers(0, 5000), st.sampled_from([0, 1, 1024, 1025, 4096, 10**7]))
names = st.one_of(
    st.sampled_from(["a", "team-a", "x" * 63, "x" * 64, "Bad_Name", "", "-a"]),
    st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
)
quantities = st.one_of(ints, st.sampled_from(["1", "500m", "40Gi", "1.5", "-1", "lots", "0", "10Ei"]))
wrong = st.one_of(
    st.none(), st.text(max_size=5), st.integers(-3, 3), st.lists(st.integers(), max_size=2), st.booleans()
)


def maybe_wrong(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly ``strategy``, now and then a value of the wrong type."""
    return st.one_of(strategy, strategy, strategy, wrong)


resources = st.fixed_dictionaries(
    {},
    optional={
        "requests": st.dictionaries(st.sampled_from(["cpu", "memory", GPU, "bogus/x"]), quantities, max_size=3),
        "limits": st.dictionaries(st.sampled_from(["cpu", "memory", GPU]), quantities, max_size=3),
    },
)
env = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["A", "API_TOKEN", "B_KEY", "x y", "", "EPOCHS"])},
        optional={"value": st.text(max_size=8), "valueFrom": st.just({"secretKeyRef": {"name": "s", "key": "k"}})},
    ),
    max_size=4,
)
topology = st.fixed_dictionaries(
    {},
    optional={
        "workers": maybe_wrong(ints),
        "parameterServers": maybe_wrong(ints),
        "replicationFactor": maybe_wrong(ints),
        "elastic": st.fixed_dictionaries({"minWorkers": ints, "maxWorkers": ints}),
    },
)
overrides = st.dictionaries(
    st.sampled_from(["master", "worker", "parameterServer", "chief"]),
    st.one_of(
        st.just({"metadata": {"labels": {"team": "a"}}}),
        st.just({"spec": {"hostNetwork": True}}),
        st.just({"spec": {"nodeSelector": {"gpu": "a100"}, "containers": [{"name": "trainer", "env": []}]}}),
        st.just({"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}}),
        st.just({"spec": {"serviceAccountName": "admin"}}),
        wrong,
    ),
    max_size=2,
)
trainer_specs = st.fixed_dictionaries(
    {"epochs": maybe_wrong(ints), "image": maybe_wrong(st.sampled_from(["busybox:1.36", "", "x" * 1025]))},
    optional={
        "framework": st.sampled_from(["generic", "pytorch", "tensorflow", "jax", "xgboost", "mxnet"]),
        "topology": topology,
        "resources": resources,
        "env": env,
        "command": st.lists(st.text(max_size=6), max_size=2),
        "checkpoint": st.fixed_dictionaries(
            {"bucket": st.sampled_from(["pvc-backups", "s3://b/p", "s3://b/../x", "", "ftp://x"])},
            optional={"intervalMinutes": ints, "maxRetention": ints},
        ),
        "runPolicy": st.fixed_dictionaries(
            {},
            optional={
                "restartPolicy": st.sampled_from(["Never", "OnFailure", "ExitCode", "Always", "Sometimes"]),
                "restartScope": st.sampled_from(["Pod", "Gang", "All"]),
                "backoffLimit": ints,
                "activeDeadlineSeconds": ints,
                "suspend": maybe_wrong(st.booleans()),
            },
        ),
        "podTemplateOverrides": overrides,
        "scheduling": st.fixed_dictionaries({}, optional={"priorityClassName": names}),
    },
)
profile_specs = st.fixed_dictionaries(
    {},
    optional={
        "nodeSelector": st.dictionaries(st.sampled_from(["gpu", "zone", "bad key!"]), st.text(max_size=6), max_size=3),
        "tolerations": st.lists(
            st.fixed_dictionaries(
                {"key": st.text(max_size=6)}, optional={"operator": st.sampled_from(["Exists", "Equal", "Maybe"])}
            ),
            max_size=2,
        ),
        "envVars": env,
        "resources": resources,
        "retryPolicy": st.fixed_dictionaries(
            {}, optional={"backoffLimit": ints, "restartPolicy": st.sampled_from(["Never", "OnFailure", "x"])}
        ),
    },
)
policy_specs = st.fixed_dictionaries(
    {
        "budgets": st.fixed_dictionaries(
            {},
            optional={
                "spot": st.dictionaries(st.just(GPU), quantities, max_size=1),
                "onDemand": st.dictionaries(st.just(GPU), quantities, max_size=1),
            },
        )
    },
    optional={
        "preference": st.sampled_from(["SpotFirst", "OnDemandFirst", "SpotOnly", "OnDemandOnly", "Cheapest"]),
        "priorityClasses": st.lists(st.fixed_dictionaries({"name": names, "value": ints}), max_size=2),
        "namespaceSelector": st.just({"matchLabels": {"team": "a"}}),
    },
)


def manifest(kind: str, name: str, spec: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "trainer.operator.kubeflow.org/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}


def names_a_field(message: str) -> bool:
    """Whether a refusal says which field is wrong (``spec...`` or a field of one)."""
    return "spec" in message


# -- what the decisions make of what the API server accepted --------------------------------------


def decide_trainer(body: dict[str, Any]) -> None:
    """The trainer's decision on the stored Trainer: with open gates and no pods, with every pod
    running, and with one of them failed. Raises if a decision crashes."""
    trainer = Trainer.model_validate(body)
    owner = Owner(body["metadata"]["name"], body["metadata"]["namespace"], "uid", 1)
    gates = ("ProfileResolved", "QuotaAdmitted", "CheckpointReady")
    open_ = parse(
        [
            {"type": g, "status": "True", "reason": "Ok", "lastTransitionTime": STAMP, "observedGeneration": 1}
            for g in gates
        ]
    )
    base = Observed(owner=owner, spec=trainer.spec, status=TrainerStatus(), conditions=open_, gates=gates, now=NOW)
    decide(base)
    pods = [
        PodView(name=r.name(owner.name), uid=f"u{i}", role=r.role, index=r.index, phase="Running", ready=True)
        for i, r in enumerate(replicas(trainer.spec))
    ]
    decide(Observed(**{**base.__dict__, "pods": pods, "services": frozenset({owner.name})}))
    if pods:
        failed = [PodView(**{**pods[0].__dict__, "phase": "Failed", "exit_code": 137}), *pods[1:]]
        decide(Observed(**{**base.__dict__, "pods": failed, "services": frozenset({owner.name})}))


def decide_profile(trainer_body: dict[str, Any], profile_body: dict[str, Any]) -> None:
    trainer = Trainer.model_validate(trainer_body)
    profile = TrainingProfile.model_validate(profile_body)
    found = FoundProfile("TrainingProfile", profile_body["metadata"]["name"], 1, profile.spec)
    profile_decide(ProfileObserved(trainer_body["metadata"]["namespace"], trainer.spec, 1, found, {}))


def decide_quota(trainer_body: dict[str, Any], policy_body: dict[str, Any]) -> None:
    policy = QuotaPolicy.model_validate(policy_body)
    allocatable = {GPU: Decimal(8), "cpu": Decimal(96), "memory": Decimal(2**40), "pods": Decimal(110)}
    node = NodeInfo(name="n1", kind="spot", allocatable=allocatable)
    info = trainer_info({**trainer_body, "metadata": {**trainer_body["metadata"], "uid": "uid", "generation": 1}})
    plan(
        QuotaObserved(
            NOW,
            [info],
            [PolicyInfo(policy_body["metadata"]["name"], policy.spec)],
            {info.namespace: {"team": "a"}},
            [node],
            [],
        )
    )
