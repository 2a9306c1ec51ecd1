"""One digest per image for the whole run (docs/image-verification.md): an image the run was let
through with keeps that digest whatever its tag names later, through scale-ups, policy changes,
closed gates and controller restarts; only an image new to the run is resolved. Each step is one
reconcile that knows only what the Trainer's status says (as a restarted controller does) and
what the registry says now."""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from trainerop_common.api.trainer import VerifyStatus
from trainerop_common.signatures import Verdict
from trainerop_verify.decide import Decision, Inspection, Lookup, Observed, decide, kept_digests, lookups
from trainerop_verify.policy import Policy, fingerprint

D1, D2, D3 = ("sha256:" + c * 64 for c in "123")
TEAM = Policy("team-signed", "Enforce", ("*",), (("team", "PEM"),))
OPS = Policy("ops-signed", "Enforce", ("*",), (("ops", "PEM"),))  # the policy added later
WARN = Policy("team-warned", "Warn", ("*",), (("team", "PEM"),))
ELSEWHERE = Policy("ghcr-only", "Enforce", ("ghcr.io/*",), (("team", "PEM"),))
BOTH = {D1: ("team", "ops"), D2: ("team", "ops"), D3: ("team", "ops")}


@dataclass(frozen=True)
class Step:
    """One reconcile: the spec's images and the namespace's policies then, what each tag names
    at the registry then and which keys signed each digest; the gate's reason and the digests the
    pods pull afterwards (image as written -> digest)."""

    generation: int
    images: tuple[str, ...]
    policies: tuple[Policy, ...]
    tags: Mapping[str, str]
    reason: str
    pins: Mapping[str, str]
    signed: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: BOTH)
    says: str = ""
    down: bool = False  # the registry does not answer


def inspected(look: Lookup, step: Step) -> Inspection:
    """What the inspector finds: the kept digest's signatures, or the tag's digest now and its."""
    if step.down:
        return Inspection(look.digest, failure="r:5000 did not answer", retry=True)
    digest = look.digest or look.ref.digest or step.tags[look.image]
    keys = step.signed.get(digest, ())
    verdicts = {}
    for p in look.policies:
        name = next((k for k, _ in p.keys if k in keys), None)
        verdicts[p.name] = Verdict(name, f"signed by {name}" if name else "it has no cosign signature")
    return Inspection(digest, verdicts)


def reconcile(status: Mapping[str, Any] | None, step: Step) -> Decision:
    """The controller's reconcile, its state read back from the status as the API server returns it."""
    raw = json.loads(json.dumps(status)) if status is not None else {}
    kept = kept_digests(VerifyStatus.model_validate(raw["verify"]) if "verify" in raw else None)
    inspections = {look.image: inspected(look, step) for look in lookups(step.images, step.policies, kept)}
    return decide(Observed(step.generation, step.images, step.policies, inspections, fingerprint(step.policies), kept))


def pins(decision: Decision) -> dict[str, str]:
    images = decision.status["verify"].get("contribution", {}).get("pod", {}).get("images", {})
    return {image: ref.rpartition("@")[2] for image, ref in images.items()}


def run(steps: Sequence[Step], status: Mapping[str, Any] | None = None) -> None:
    for number, step in enumerate(steps, 1):
        decision = reconcile(status, step)
        (condition,) = decision.conditions
        assert (condition.reason, pins(decision)) == (step.reason, step.pins), f"step {number}"
        assert step.says in condition.message, f"step {number}"
        checked = {c["image"]: c.get("digest") for c in decision.status["verify"].get("images", ())}
        assert all(checked[image] == digest for image, digest in step.pins.items()), f"step {number}"
        again = reconcile(decision.status, step)  # nothing changed: the same status, so no write
        assert (again.status, again.conditions) == (decision.status, decision.conditions), f"step {number}"
        status = decision.status


JAX = ("jax:dev",)
FIRST = Step(1, JAX, (TEAM,), {"jax:dev": D1}, "Verified", {"jax:dev": D1})
KEEPS = "it keeps the digest it was let through with for jax:dev, whatever the tag names now"
CHANGE = "sign that digest, or change the image in the Trainer (a new tag, or a digest) to run another"
RUNS: dict[str, list[Step]] = {
    "a scale-up after the tag moved pulls the first digest": [
        FIRST,
        Step(2, JAX, (TEAM,), {"jax:dev": D2}, "Verified", {"jax:dev": D1}, says=f"jax:dev ({D1[:19]}…) signed by"),
        Step(3, JAX, (TEAM,), {"jax:dev": D3}, "Verified", {"jax:dev": D1}),
    ],
    "a changed image string is resolved anew, the old one forgotten": [
        FIRST,
        Step(2, ("jax:v2",), (TEAM,), {"jax:v2": D2, "jax:dev": D3}, "Verified", {"jax:v2": D2}),
        Step(3, JAX, (TEAM,), {"jax:v2": D2, "jax:dev": D3}, "Verified", {"jax:dev": D3}),
    ],
    "a new role's image is resolved, the kept one is not": [
        FIRST,
        Step(
            2, ("jax:dev", "side:1"), (TEAM,), {"jax:dev": D2, "side:1": D3}, "Verified", {"jax:dev": D1, "side:1": D3}
        ),
    ],
    "a policy added later that refuses the kept digest holds the run until the image changes": [
        FIRST,
        Step(1, JAX, (TEAM, OPS), {"jax:dev": D2}, "Unschedulable", {"jax:dev": D1}, {D1: ("team",), D2: BOTH[D2]}),
        Step(2, JAX, (TEAM, OPS), {"jax:dev": D2}, "Unschedulable", {"jax:dev": D1}, {D1: ("team",), D2: BOTH[D2]}),
        Step(3, ("jax:v2",), (TEAM, OPS), {"jax:v2": D2}, "Verified", {"jax:v2": D2}, {D1: ("team",), D2: BOTH[D2]}),
    ],
    "signing the kept digest opens the gate again, on that digest": [
        FIRST,
        Step(1, JAX, (TEAM, OPS), {"jax:dev": D2}, "Unschedulable", {"jax:dev": D1}, {D1: ("team",)}),
        Step(1, JAX, (TEAM, OPS), {"jax:dev": D2}, "Verified", {"jax:dev": D1}),
    ],
    "a closed gate keeps nothing it resolved: a new image is resolved again": [
        Step(1, JAX, (TEAM,), {"jax:dev": D1}, "Unschedulable", {}, {D1: ()}, says="no cosign signature"),
        Step(1, JAX, (TEAM,), {"jax:dev": D2}, "Verified", {"jax:dev": D2}),
    ],
    "a refused new image leaves the kept one as it was": [
        FIRST,
        Step(
            2,
            ("jax:dev", "side:1"),
            (TEAM,),
            {"jax:dev": D2, "side:1": D3},
            "Unschedulable",
            {"jax:dev": D1},
            {D1: ("team",)},
        ),
        Step(
            3, ("jax:dev", "side:1"), (TEAM,), {"jax:dev": D3, "side:1": D2}, "Verified", {"jax:dev": D1, "side:1": D2}
        ),
    ],
    "a policy removed: the digest stays pinned": [
        FIRST,
        Step(2, JAX, (), {"jax:dev": D2}, "NoPolicy", {"jax:dev": D1}),
    ],
    "a Warn policy's unsigned digest is kept too": [
        Step(1, JAX, (WARN,), {"jax:dev": D1}, "Warned", {"jax:dev": D1}, {}),
        Step(2, JAX, (WARN,), {"jax:dev": D2}, "Warned", {"jax:dev": D1}, {}),
    ],
    "the registry down: the kept digest stays the pods' image": [
        FIRST,
        Step(2, JAX, (TEAM,), {"jax:dev": D2}, "RegistryUnavailable", {"jax:dev": D1}, down=True),
        Step(2, JAX, (TEAM,), {"jax:dev": D2}, "Verified", {"jax:dev": D1}),
    ],
    "an image no policy governs runs as written, never pinned": [
        Step(1, JAX, (ELSEWHERE,), {"jax:dev": D1}, "NoPolicy", {}),
        Step(2, JAX, (ELSEWHERE,), {"jax:dev": D2}, "NoPolicy", {}),
    ],
}


@pytest.mark.parametrize("steps", RUNS.values(), ids=RUNS.keys())
def test_an_image_keeps_the_digest_the_run_was_let_through_with(steps: list[Step]) -> None:
    run(steps)


def test_a_refused_kept_digest_tells_the_user_to_sign_it_or_change_the_image() -> None:
    refused = Step(2, JAX, (TEAM, OPS), {"jax:dev": D2}, "Unschedulable", {"jax:dev": D1}, {D1: ("team",)})
    decision = reconcile(reconcile(None, FIRST).status, refused)
    message = decision.conditions[0].message
    assert message.startswith(f"image jax:dev ({D1[:19]}…): it has no cosign signature (ImagePolicy 'ops-signed'")
    assert KEEPS in message
    assert CHANGE in message
    assert (decision.refused, decision.retry, decision.problem is not None) == (True, False, True)


def test_a_refusal_of_many_images_still_says_how_to_move_on() -> None:
    images = tuple(f"registry.corp.io/team/a-very-long-repository-name-for-image-{i}:v1" for i in range(20))
    first = Step(1, images, (TEAM,), dict.fromkeys(images, D1), "Verified", dict.fromkeys(images, D1))
    refused = Step(2, images, (TEAM, OPS), dict.fromkeys(images, D2), "Unschedulable", dict.fromkeys(images, D1), {})
    decision = reconcile(reconcile(None, first).status, refused)
    message = decision.conditions[0].message
    assert len(message) <= 1024
    assert message.endswith(CHANGE)


def test_a_restarted_controller_reads_the_kept_digest_from_the_status() -> None:
    """The status as the API server returns it to a controller that has just started (no memory of
    its own): the tag moved meanwhile, and a scale-up still pulls the digest the run was let through with."""
    status = {
        "verify": {
            "generation": 1,
            "policies": fingerprint((TEAM,)),
            "images": [{"image": "jax:dev", "digest": D1, "signedBy": ["team"], "policies": ["team-signed"]}],
            "contribution": {"generation": 1, "pod": {"images": {"jax:dev": f"docker.io/library/jax@{D1}"}}},
        }
    }
    run([Step(2, JAX, (TEAM,), {"jax:dev": D2}, "Verified", {"jax:dev": D1})], status)


def test_too_many_images_keep_the_kept_digests() -> None:
    images = tuple(f"img{i}:1" for i in range(33))
    kept = {"img0:1": D1}
    decision = decide(Observed(2, images, (TEAM,), {}, "fp", kept))
    assert decision.conditions[0].reason == "Unschedulable"
    assert pins(decision) == kept


@pytest.mark.parametrize(
    ("section", "kept"),
    [
        (None, {}),
        ({"generation": 1}, {}),
        (
            {"contribution": {"generation": 1, "pod": {"images": {"jax:dev": f"docker.io/library/jax@{D1}"}}}},
            {"jax:dev": D1},
        ),
        ({"contribution": {"generation": 1, "pod": {"images": {"jax:dev": f"docker.io/library/other@{D1}"}}}}, {}),
        ({"contribution": {"generation": 1, "pod": {"images": {"jax:dev": "docker.io/library/jax@sha256:abc"}}}}, {}),
        ({"contribution": {"generation": 1, "pod": {"images": {"jax:dev": "docker.io/library/jax:dev"}}}}, {}),
        ({"contribution": {"generation": 1, "pod": {"images": {"Bad:Name": f"Bad:Name@{D1}"}}}}, {}),
    ],
    ids=["no section", "no contribution", "kept", "another image's pin", "not a digest", "a tag", "unreadable image"],
)
def test_only_the_image_by_its_own_digest_is_kept(section: dict[str, Any] | None, kept: dict[str, str]) -> None:
    assert kept_digests(VerifyStatus.model_validate(section) if section is not None else None) == kept


def test_a_kept_image_is_read_by_its_digest_a_new_one_by_its_tag() -> None:
    found = lookups(("jax:dev", "side:1", "ghcr.io/o/x:1"), (TEAM, ELSEWHERE), {"jax:dev": D1, "gone:1": D2})
    assert [(look.image, look.policies, look.digest) for look in found] == [
        ("jax:dev", (TEAM,), D1),
        ("side:1", (TEAM,), None),
        ("ghcr.io/o/x:1", (TEAM, ELSEWHERE), None),
    ]
