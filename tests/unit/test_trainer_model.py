"""spec.model in the trainer (docs/models.md): the initializer's container and the read-only mount
in each pod, MODEL_PATH, the initializer's outcome read from the pod, and the ModelVerified
condition with its Warning Event."""

from typing import Any

import pytest

from tests.factories import trainer_spec
from tests.unit.test_decide_trainer import OPEN, by_type, cond, observe, pod
from trainerop_common.admission import Request
from trainerop_common.api.base import Condition
from trainerop_trainer.admission import validate
from trainerop_trainer.model import ModelSettings, model_condition
from trainerop_trainer.pods import Owner, PodSettings, pod_manifest
from trainerop_trainer.topology import Replica
from trainerop_trainer.views import model_outcome, pod_essentials, pod_view

OWNER = Owner("llama", "team-a", "uid-1", 3)
COMMIT = "0123456789abcdef0123456789abcdef01234567"
MODEL = {"source": "hf://acme/tiny@main", "cacheClaim": "models", "files": ["*.json", "weights/"]}
SEED: dict[str, Any] = {"image": "train:1", "framework": "jax", "topology": {"workers": 2}, "model": MODEL}
SETTINGS = PodSettings(model=ModelSettings(image="operator:7", endpoint="http://mirror.internal"))


def worker(index: int = 1, settings: PodSettings = SETTINGS, **model: Any) -> dict[str, Any]:
    spec = trainer_spec(**{**SEED, "model": {**MODEL, **model}})
    return pod_manifest(OWNER, spec, Replica("worker", index), {}, settings)


def test_each_pod_fetches_the_model_first_and_trains_on_it_read_only() -> None:
    pod_spec = worker()["spec"]
    init, rendezvous = pod_spec["initContainers"]
    assert rendezvous["name"] == "wait-for-rendezvous"  # after the model: its wait is short
    assert (init["name"], init["image"]) == ("model-init", "operator:7")
    assert init["command"] == [
        "trainerop-model-init",
        *("--source", "hf://acme/tiny@main", "--cache", "/model-cache"),
        *("--files", "*.json", "--files", "weights/"),
    ]
    assert init["env"] == [{"name": "HF_ENDPOINT", "value": "http://mirror.internal"}]
    assert init["volumeMounts"] == [{"name": "model-cache", "mountPath": "/model-cache"}]
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "models"}} in pod_spec["volumes"]
    training = pod_spec["containers"][0]
    assert {"name": "model-cache", "mountPath": "/models", "readOnly": True} in training["volumeMounts"]
    env = {e["name"]: e.get("value") for e in training["env"]}
    # the revision's directory for these patterns (trainerop_sdk.models.revision_dir)
    assert env["MODEL_PATH"].startswith("/models/hf/acme/tiny/main-")
    assert "HF_TOKEN" not in env  # the token is the initializer's alone


def test_a_token_comes_from_its_secret_and_the_trainers_endpoint_wins() -> None:
    init = worker(tokenSecret="hub-token", endpoint="http://hub.team-a:8080")["spec"]["initContainers"][0]
    assert init["env"] == [
        {"name": "HF_ENDPOINT", "value": "http://hub.team-a:8080"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub-token", "key": "HF_TOKEN"}}},
    ]


def test_without_an_endpoint_the_initializer_uses_the_hubs_own() -> None:
    init = worker(settings=PodSettings())["spec"]["initContainers"][0]
    assert "env" not in init
    assert init["image"] == "trainer-operator:dev"


def test_a_pinned_model_without_patterns_is_found_at_its_commit() -> None:
    pod = worker(source=f"hf://acme/tiny@{COMMIT}", files=None, mountPath="/weights")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["MODEL_PATH"] == f"/weights/hf/acme/tiny/{COMMIT}"


PIN = "ab" * 32


@pytest.mark.parametrize("endpoint", [None, "http://s3.team-a:8333"])
def test_an_s3_model_gets_its_credentials_from_its_secret_and_no_hub_setting(endpoint: str | None) -> None:
    source = f"s3://models/llama/tiny@sha256:{PIN}"
    pod = worker(source=source, files=None, credentialsSecret="s3-creds", endpoint=endpoint)
    init = pod["spec"]["initContainers"][0]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in init["env"] if "valueFrom" in e}
    assert refs["AWS_ACCESS_KEY_ID"] == {"name": "s3-creds", "key": "AWS_ACCESS_KEY_ID"}
    assert refs["AWS_REGION"] == {"name": "s3-creds", "key": "AWS_REGION", "optional": True}
    values = {e["name"]: e["value"] for e in init["env"] if "value" in e}
    # the model's endpoint as the S3-specific variable (over the Secret's), never the Hub's setting
    assert values == ({"AWS_ENDPOINT_URL_S3": endpoint} if endpoint else {})
    assert ("AWS_ENDPOINT_URL_S3" in refs) == (endpoint is None)
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["MODEL_PATH"] == f"/models/s3/models/llama/tiny/@{PIN}"
    assert not any(name.startswith("AWS_") for name in env)  # the credentials are the initializer's alone


def test_a_run_without_a_model_has_none_of_it() -> None:
    spec = trainer_spec(**{**SEED, "model": None})
    pod = pod_manifest(OWNER, spec, Replica("worker", 0), {}, SETTINGS)
    assert "initContainers" not in pod["spec"]  # worker 0 of jax is the coordinator: no wait either
    assert "MODEL_PATH" not in {e["name"] for e in pod["spec"]["containers"][0]["env"]}


def terminated(code: int, message: str = "", reason: str = "Error") -> list[dict[str, Any]]:
    ended = {"exitCode": code, "reason": reason, **({"message": message} if message else {})}
    return [{"name": "model-init", "state": {"terminated": ended}}]


# initContainerStatuses -> what the trainer reads of the initializer
OUTCOMES = [
    ([], None),
    ([{"name": "model-init", "state": {"running": {}}}], None),
    ([{"name": "wait-for-rendezvous", "state": {"terminated": {"exitCode": 1}}}], None),
    (terminated(0, "Verified: hf://a/b@main at commit c: 3 files"), ("Verified", "hf://a/b@main at commit c: 3 files")),
    (terminated(0), ("Verified", "the model is in the cache")),
    (terminated(1, "HashMismatch: refused: a.bin: sha256 x"), ("HashMismatch", "refused: a.bin: sha256 x")),
    (terminated(137, reason="OOMKilled"), ("FetchFailed", "the initializer exited with code 137 (OOMKilled)")),
    (terminated(1, "Traceback ...\nMemoryError"), ("FetchFailed", "Traceback ...\nMemoryError")),
]  # fmt: skip


@pytest.mark.parametrize(("statuses", "expected"), OUTCOMES)
def test_the_initializers_outcome_is_read_from_the_pod(statuses: list[Any], expected: tuple[str, str] | None) -> None:
    assert model_outcome(statuses) == expected


def test_the_pod_cache_keeps_the_initializers_outcome_and_no_more() -> None:
    body = worker(0)
    body["status"] = {
        "phase": "Failed",
        "initContainerStatuses": [
            {"name": "model-init", "image": "operator:7", "state": terminated(1, "HashMismatch: a.bin")[0]["state"]},
            {"name": "wait-for-rendezvous", "state": {"waiting": {"reason": "PodInitializing"}}},
        ],
    }
    kept = pod_essentials(body)
    assert kept["status"]["initContainerStatuses"] == terminated(1, "HashMismatch: a.bin")
    assert pod_view(kept, "jax") == pod_view(body, "jax")
    assert pod_view(kept, "jax").model == ("HashMismatch", "a.bin")  # type: ignore[union-attr]


MODEL_SPEC = trainer_spec(**SEED).model
VERIFIED_POD = pod("worker", 0, model=("Verified", "hf://acme/tiny@main at commit c: 3 files"))
REFUSED_POD = pod("worker", 1, "Failed", model=("HashMismatch", "refused: a.bin"))
STARTING = pod("worker", 1, "Pending")
WAS_REFUSED = [cond("ModelVerified", "False", "HashMismatch", message="pod t-worker-1: refused: a.bin")]
WAS_VERIFIED = [cond("ModelVerified", "True", "Verified", message="hf://acme/tiny@main at commit c: 3 files")]

# pods, the condition before -> the condition (status, reason, message start), and whether it warns
CONDITIONS: list[tuple[list[Any], list[Condition], tuple[str, str, str] | None, bool]] = [
    ([STARTING], [], ("Unknown", "Fetching", "fetching hf://acme/tiny@main into claim models"), False),
    ([VERIFIED_POD, STARTING], [], ("True", "Verified", "hf://acme/tiny@main at commit c"), False),
    ([VERIFIED_POD, REFUSED_POD], [], ("False", "HashMismatch", "pod t-worker-1: refused: a.bin"), True),
    ([VERIFIED_POD, REFUSED_POD], WAS_REFUSED, ("False", "HashMismatch", "pod t-worker-1: refused: a.bin"), False),
    ([VERIFIED_POD, REFUSED_POD], WAS_VERIFIED, ("False", "HashMismatch", "pod t-worker-1"), True),
    # the refused pod replaced, its successor still fetching: the refusal stands until one succeeds
    ([STARTING], WAS_REFUSED, ("False", "HashMismatch", "pod t-worker-1"), False),
    ([VERIFIED_POD], WAS_REFUSED, ("True", "Verified", "hf://acme/tiny@main"), False),
]


@pytest.mark.parametrize(("pods", "before", "expected", "warns"), CONDITIONS)
def test_model_verified_says_the_latest_word_of_the_initializers(
    pods: list[Any], before: list[Condition], expected: tuple[str, str, str], warns: bool
) -> None:
    condition, warning = model_condition(MODEL_SPEC, pods, before)
    assert condition is not None
    assert (condition.status, condition.reason) == expected[:2]
    assert condition.message.startswith(expected[2])
    assert (warning is not None) == warns


def test_a_run_without_a_model_has_no_such_condition() -> None:
    assert model_condition(None, [VERIFIED_POD], WAS_VERIFIED) == (None, None)


def test_a_refused_model_is_a_condition_an_event_and_a_retried_pod() -> None:
    spec = trainer_spec(**{**SEED, "topology": {"workers": 2}})
    decision = observe(spec, [VERIFIED_POD, REFUSED_POD])
    condition = by_type(decision)["ModelVerified"]
    assert (condition.status, condition.reason) == ("False", "HashMismatch")
    assert ("Warning", "HashMismatch", "pod t-worker-1: refused: a.bin") in decision.on_change
    assert "t-worker-1" in decision.delete_pods  # replaced, as any failure without an exit code
    assert decision.status["phase"] == "Restarting"


def test_a_model_refused_past_the_backoff_limit_names_the_file() -> None:
    spec = trainer_spec(**{**SEED, "runPolicy": {"backoffLimit": 0}})
    decision = observe(spec, [VERIFIED_POD, REFUSED_POD])
    failed = by_type(decision)["Failed"]
    assert failed.reason == "BackoffLimitExceeded"
    assert "pod t-worker-1's model initializer failed: HashMismatch: refused: a.bin" in failed.message


def test_a_source_the_initializer_cannot_read_creates_no_pod() -> None:
    spec = trainer_spec(**{**SEED, "model": {**MODEL, "source": "hf://acme/ti--ny@main"}})  # the pattern lets it by
    decision = observe(spec, [], conditions=OPEN)
    created = by_type(decision)["Created"]
    assert (created.status, created.reason) == ("False", "InvalidModel")
    assert "'acme/ti--ny' is not a Hub repository" in created.message
    assert not decision.create_pods
    assert decision.status["reason"] == "InvalidModel"
    request = Request("CREATE", "ns", "t", {"model": MODEL | {"source": "hf://acme/ti--ny@main"}}, None)
    verdict = validate(request, spec, None)
    assert not verdict.allowed
    assert verdict.problems[0].startswith("spec.model.source: model source 'hf://acme/ti--ny@main'")


PROFILE_MODEL = {"source": "hf://acme/base@v1", "cacheClaim": "shared-models"}


@pytest.mark.parametrize(
    ("own", "profile_section", "expected"),
    [
        (None, {"name": "p", "model": PROFILE_MODEL}, "hf://acme/base@v1"),  # the profile's
        (MODEL, {"name": "p", "model": PROFILE_MODEL}, "hf://acme/tiny@main"),  # the Trainer's own wins
        (None, {"name": "p"}, None),  # a profile without one
    ],
)
def test_a_run_starts_from_its_profiles_model_unless_it_names_its_own(
    own: dict[str, Any] | None, profile_section: dict[str, Any], expected: str | None
) -> None:
    spec = trainer_spec(**{**SEED, "model": own, "profile": "p"})
    decision = observe(spec, [], conditions=[*OPEN], status={"profile": profile_section})
    inits = [c for pod in decision.create_pods for c in pod["spec"].get("initContainers", ())]
    sources = {c["command"][2] for c in inits if c["name"] == "model-init"}
    assert sources == ({expected} if expected else set())
    assert len(decision.create_pods) == 2
    condition = by_type(decision).get("ModelVerified")
    assert (condition.reason if condition else None) == ("Fetching" if expected else None)


def test_a_profiles_model_the_initializer_cannot_read_is_named_as_the_profiles() -> None:
    spec = trainer_spec(**{**SEED, "model": None, "profile": "p"})
    bad = {"name": "p", "model": {"source": "hf://acme/ba--se@v1", "cacheClaim": "models"}}
    decision = observe(spec, [], conditions=[*OPEN], status={"profile": bad})
    created = by_type(decision)["Created"]
    assert (created.status, created.reason) == ("False", "InvalidModel")
    assert created.message.startswith("profile p's spec.model.source: model source 'hf://acme/ba--se@v1'")
    assert not decision.create_pods


def test_the_verdict_does_not_depend_on_the_order_the_pods_are_seen_in() -> None:
    """Two ranks say different words (one downloaded, one found the cache): the condition says the
    same whichever the cache lists first, so a reconcile that sees nothing new writes nothing."""
    found = pod("worker", 1, model=("Verified", "hf://acme/tiny@main at commit c: 3 files found checked in the cache"))
    in_order, reversed_ = (
        model_condition(MODEL_SPEC, pods, []) for pods in ([VERIFIED_POD, found], [found, VERIFIED_POD])
    )
    assert in_order == reversed_
    assert in_order[0] is not None
    assert in_order[0].message == VERIFIED_POD.model[1]  # type: ignore[index]
