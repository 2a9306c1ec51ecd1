"""The verify controller's decision core: pure, table-tested, no I/O (docs/image-verification.md).

Every image a run names is governed by the ImagePolicies of its namespace whose globs match its
name. A governed image is resolved to a digest and accepted when, for each policy, a cosign
signature of that digest holds for one of the policy's keys. The gate ``ImagesVerified`` opens
when every image an ``Enforce`` policy governs is accepted; a ``Warn`` policy's failure is said
(status, a Warning Event) and lets the run go. The digests become the pods' images (the
contribution's ``images``), so what was verified is what runs.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainerop_common.api import Contribution, PodContribution
from trainerop_common.api.trainer import ImageCheck
from trainerop_common.conditions import Desired
from trainerop_common.contracts import GATE_CONDITIONS
from trainerop_common.outcome import StatusSection
from trainerop_common.signatures import Verdict

from .policy import Policy
from .references import Reference, ReferenceError, parse

CONDITION = GATE_CONDITIONS["verify"]
SECTION = StatusSection(("verify",), (CONDITION,))
REFUSED = "Unschedulable"  # the product's word for a run whose images may not run
UNREACHABLE = "RegistryUnavailable"
MAX_IMAGES = 32  # status.verify.images and the contribution's images hold this many
MAX_NAMES = 16  # keys and policies listed per image


@dataclass(frozen=True)
class Inspection:
    """What the registry said of one image: its digest and, per governing policy, the verdict on
    its signatures; or why it could not be read (``retry``: the registry did not answer)."""

    digest: str | None = None
    verdicts: Mapping[str, Verdict] = field(default_factory=dict)  # policy name -> verdict
    failure: str | None = None
    retry: bool = False


@dataclass(frozen=True)
class Observed:
    generation: int
    images: Sequence[str]  # as the Trainer writes them
    policies: Sequence[Policy]  # the namespace's
    inspections: Mapping[str, Inspection]  # of the governed images
    fingerprint: str = ""


@dataclass(frozen=True)
class Decision:
    status: dict[str, Any]
    conditions: tuple[Desired, ...]
    problem: Desired | None = None  # Enforce refused, or the registry down: an Event once
    warnings: tuple[str, ...] = ()  # Warn policies' failures: an Event once
    retry: bool = False  # a registry did not answer: looked at again with backoff
    refused: bool = False  # looked at again after a while (the image may be signed since)


@dataclass(frozen=True)
class Judged:
    check: ImageCheck
    enforced: str | None = None  # why an Enforce policy refuses it
    warned: str | None = None  # why a Warn policy would
    unreachable: str | None = None  # the registry did not answer (the run waits and it is asked again)


def governing(image: str, policies: Sequence[Policy]) -> tuple[Reference | None, list[Policy], str | None]:
    """The parsed reference and the policies that govern it; an unreadable reference is governed
    by every policy (nothing unreadable runs past an Enforce policy)."""
    try:
        ref = parse(image)
    except ReferenceError as err:
        return None, list(policies), str(err)
    return ref, [p for p in policies if p.governs(ref.name)], None


def judge(image: str, policies: Sequence[Policy], seen: Inspection | None) -> Judged:
    _, governed, unreadable = governing(image, policies)
    names = [p.name for p in governed] or None
    if not governed:
        return Judged(ImageCheck(image=image))
    seen = seen or Inspection(failure="not inspected yet", retry=True)
    why = unreadable or seen.failure
    refusals = {p.name: why or seen.verdicts.get(p.name, Verdict(None, "not checked")).why for p in governed}
    signed = sorted({v.signed_by for v in seen.verdicts.values() if v.signed_by is not None})
    failing = [p for p in governed if why or seen.verdicts.get(p.name, Verdict(None, "")).signed_by is None]
    enforced = next((f"{refusals[p.name]} ({p.describe()})" for p in failing if p.mode == "Enforce"), None)
    warned = next((f"{refusals[p.name]} ({p.describe()})" for p in failing if p.mode == "Warn"), None)
    check = ImageCheck(
        image=image,
        digest=seen.digest,
        signed_by=signed[:MAX_NAMES] or None,
        policies=names[:MAX_NAMES] if names else None,
        problem=(enforced or warned or "")[:512] or None,
    )
    return Judged(check, enforced, warned, seen.failure if seen.retry and not unreadable else None)


def decide(obs: Observed) -> Decision:
    if obs.policies and len(obs.images) > MAX_IMAGES:
        message = (
            f"the run names {len(obs.images)} images; ImagePolicies check at most {MAX_IMAGES} a run: "
            "build fewer images, or run it in a namespace without policies"
        )
        problem = Desired.false(CONDITION, REFUSED, message)
        said = {"generation": obs.generation, "policies": obs.fingerprint}
        return Decision({"verify": said}, (problem,), problem, refused=True)
    judged = {image: judge(image, obs.policies, obs.inspections.get(image)) for image in obs.images}
    section: dict[str, Any] = {
        "generation": obs.generation,
        "policies": obs.fingerprint,
        "images": [j.check.to_k8s() for j in judged.values()],
    }
    pins = {i: pinned(i, j.check.digest) for i, j in judged.items() if j.check.digest}
    if pins:
        pod = PodContribution(images=pins)
        section["contribution"] = Contribution(generation=obs.generation, pod=pod).to_k8s()
    status = {"verify": section}
    warnings = tuple(f"image {i}: {j.warned}" for i, j in judged.items() if j.warned and not j.enforced)
    unreachable = [(i, j.unreachable) for i, j in judged.items() if j.enforced and j.unreachable]
    if unreachable:
        image, why = unreachable[0]
        message = f"image {image}: {why}; asked again with backoff (the run waits, with no pods)"
        problem = Desired.false(CONDITION, UNREACHABLE, message[:1024])
        return Decision(status, (problem,), problem, warnings, retry=True)
    refused = [(i, j) for i, j in judged.items() if j.enforced]
    if refused:
        text = "; ".join(f"image {i}{at(j.check.digest)}: {j.enforced}" for i, j in refused)
        message = f"{text}; the run gets no pods until its images are signed by a key of the policy"
        problem = Desired.false(CONDITION, REFUSED, message[:1024])
        return Decision(status, (problem,), problem, warnings, refused=True)
    return Decision(status, (accepted(judged, warnings),), None, warnings)


def accepted(judged: Mapping[str, Judged], warnings: Sequence[str]) -> Desired:
    governed = [(i, j.check) for i, j in judged.items() if j.check.policies]
    if not governed:
        return Desired.true(CONDITION, "NoPolicy", "no ImagePolicy of the namespace governs the run's images")
    if warnings:
        return Desired.true(CONDITION, "Warned", "; ".join(warnings)[:1024])
    text = "; ".join(f"{i}{at(c.digest)} signed by {', '.join(c.signed_by or ())}" for i, c in governed)
    return Desired.true(CONDITION, "Verified", text[:1024])


def pinned(image: str, digest: str) -> str:
    try:
        return parse(image).pinned(digest)
    except ReferenceError:  # never resolved, so never reached
        return image


def at(digest: str | None) -> str:
    return f" ({digest[:19]}…)" if digest else ""
