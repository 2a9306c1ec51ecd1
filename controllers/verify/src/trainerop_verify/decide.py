"""The verify controller's decision core: pure, table-tested, no I/O (docs/image-verification.md).

Every image a run names is governed by the ImagePolicies of its namespace whose globs match its
name. A governed image is resolved to a digest and accepted when, for each policy, a cosign
signature of that digest holds for one of the policy's keys. The gate ``ImagesVerified`` opens
when every image an ``Enforce`` policy governs is accepted; a ``Warn`` policy's failure is said
(status, a Warning Event) and lets the run go. The digests become the pods' images (the
contribution's ``images``), so what was verified is what runs.

An image the run was let through with keeps that digest for the whole run (``kept``: read back
from the contribution the controller wrote, so a restart keeps it too): a new generation, a
changed policy or a closed gate checks that same digest again, never what the tag names now, so
one run never mixes two images under one name. Only an image new to the run (a changed image
string, a new role's image) is resolved. A closed gate contributes the kept digests only: what
was resolved for it was not let through, and is resolved again next time.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainerop_common.api import Contribution, PodContribution
from trainerop_common.api.trainer import ImageCheck, VerifyStatus
from trainerop_common.conditions import Desired
from trainerop_common.contracts import GATE_CONDITIONS
from trainerop_common.outcome import StatusSection
from trainerop_common.signatures import Verdict

from .policy import Policy
from .references import DIGEST, Reference, ReferenceError, parse

CONDITION = GATE_CONDITIONS["verify"]
SECTION = StatusSection(("verify",), (CONDITION,))
REFUSED = "Unschedulable"  # the product's word for a run whose images may not run
UNREACHABLE = "RegistryUnavailable"
MAX_IMAGES = 32  # status.verify.images and the contribution's images hold this many
MAX_NAMES = 16  # keys and policies listed per image
MAX_MESSAGE = 1024  # a condition's message
SIGN = "the run gets no pods until its images are signed by a key of the policy"
KEEPS = (
    "it keeps the digest it was let through with for {images}, whatever the tag names now (its pods run "
    "that image): sign that digest, or change the image in the Trainer (a new tag, or a digest) to run another"
)


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
    kept: Mapping[str, str] = field(default_factory=dict)  # image as written -> the digest the run was let through with


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


@dataclass(frozen=True)
class Lookup:
    """One governed image to read at its registry: by the digest the run keeps, else by its tag."""

    image: str
    ref: Reference
    policies: tuple[Policy, ...]
    digest: str | None  # kept: checked against the policies, never resolved again


def lookups(images: Sequence[str], policies: Sequence[Policy], kept: Mapping[str, str]) -> list[Lookup]:
    found = []
    for image in images:
        ref, governed, _ = governing(image, policies)
        if ref is not None and governed:
            found.append(Lookup(image, ref, tuple(governed), kept.get(image)))
    return found


def judge(image: str, policies: Sequence[Policy], seen: Inspection | None, kept: str | None = None) -> Judged:
    """``kept``: the digest the run was let through with (an image no policy governs any more
    keeps it too: one digest per image for the whole run)."""
    _, governed, unreadable = governing(image, policies)
    names = [p.name for p in governed] or None
    if not governed:
        return Judged(ImageCheck(image=image, digest=kept))
    seen = seen or Inspection(failure="not inspected yet", retry=True)
    why = unreadable or seen.failure
    refusals = {p.name: why or seen.verdicts.get(p.name, Verdict(None, "not checked")).why for p in governed}
    signed = sorted({v.signed_by for v in seen.verdicts.values() if v.signed_by is not None})
    failing = [p for p in governed if why or seen.verdicts.get(p.name, Verdict(None, "")).signed_by is None]
    enforced = next((f"{refusals[p.name]} ({p.describe()})" for p in failing if p.mode == "Enforce"), None)
    warned = next((f"{refusals[p.name]} ({p.describe()})" for p in failing if p.mode == "Warn"), None)
    check = ImageCheck(
        image=image,
        digest=seen.digest or kept,
        signed_by=signed[:MAX_NAMES] or None,
        policies=names[:MAX_NAMES] if names else None,
        problem=(enforced or warned or "")[:512] or None,
    )
    return Judged(check, enforced, warned, seen.failure if seen.retry and not unreadable else None)


def decide(obs: Observed) -> Decision:
    kept = {image: obs.kept[image] for image in obs.images if image in obs.kept}  # an image named no more is forgotten
    if obs.policies and len(obs.images) > MAX_IMAGES:
        return too_many(obs, kept)
    judged = {image: judge(image, obs.policies, obs.inspections.get(image), kept.get(image)) for image in obs.images}
    warnings = tuple(f"image {i}: {j.warned}" for i, j in judged.items() if j.warned and not j.enforced)
    problem = unreachable(judged) or refusal(judged, kept)
    # Let through: every digest checked is pinned, and kept from now on. Closed: the kept ones only.
    digests = kept if problem is not None else {i: j.check.digest for i, j in judged.items() if j.check.digest}
    status = {"verify": section(obs, digests, [j.check for j in judged.values()])}
    if problem is None:
        return Decision(status, (accepted(judged, warnings),), None, warnings)
    retry = problem.reason == UNREACHABLE
    return Decision(status, (problem,), problem, warnings, retry=retry, refused=not retry)


def too_many(obs: Observed, kept: Mapping[str, str]) -> Decision:
    message = (
        f"the run names {len(obs.images)} images; ImagePolicies check at most {MAX_IMAGES} a run: "
        "build fewer images, or run it in a namespace without policies"
    )
    problem = Desired.false(CONDITION, REFUSED, message)
    return Decision({"verify": section(obs, kept, None)}, (problem,), problem, refused=True)


def section(obs: Observed, digests: Mapping[str, str], checks: Sequence[ImageCheck] | None) -> dict[str, Any]:
    """``status.verify``: the images as checked, and the digests the pods pull (the contribution)."""
    said: dict[str, Any] = {"generation": obs.generation, "policies": obs.fingerprint}
    if checks is not None:
        said["images"] = [c.to_k8s() for c in checks]
    if digests:
        pod = PodContribution(images={image: pinned(image, digest) for image, digest in digests.items()})
        said["contribution"] = Contribution(generation=obs.generation, pod=pod).to_k8s()
    return said


def unreachable(judged: Mapping[str, Judged]) -> Desired | None:
    down = [(i, j.unreachable) for i, j in judged.items() if j.enforced and j.unreachable]
    if not down:
        return None
    image, why = down[0]
    message = f"image {image}: {why}; asked again with backoff (the run waits, with no pods)"
    return Desired.false(CONDITION, UNREACHABLE, message[:MAX_MESSAGE])


def refusal(judged: Mapping[str, Judged], kept: Mapping[str, str]) -> Desired | None:
    """Why an Enforce policy refuses: each image with its digest; for a digest the run keeps, how
    the user moves on (a moved tag is not picked up: the run would mix two images)."""
    refused = [(i, j) for i, j in judged.items() if j.enforced]
    if not refused:
        return None
    held = ", ".join(i for i, _ in refused if i in kept)
    held = held if len(held) <= MAX_MESSAGE // 4 else f"{held[: MAX_MESSAGE // 4 - 1]}…"
    advice = f"{SIGN}; {KEEPS.format(images=held)}" if held else SIGN
    text = "; ".join(f"image {i}{at(j.check.digest)}: {j.enforced}" for i, j in refused)
    return Desired.false(CONDITION, REFUSED, f"{text[: MAX_MESSAGE - len(advice) - 2]}; {advice}")


def kept_digests(section: VerifyStatus | None) -> dict[str, str]:
    """The digests the run was let through with (image as written -> digest), read back from its
    own section's contribution: the status keeps them across restarts. A pin that is not the
    image's own name by digest is not kept (the image is resolved as new)."""
    pins = section.contribution.pod.images if section is not None and section.contribution is not None else None
    kept: dict[str, str] = {}
    for image, ref in (pins or {}).items():
        digest = ref.rpartition("@")[2]
        if DIGEST.match(digest) and pinned(image, digest) == ref:
            kept[image] = digest
    return kept


def accepted(judged: Mapping[str, Judged], warnings: Sequence[str]) -> Desired:
    governed = [(i, j.check) for i, j in judged.items() if j.check.policies]
    if not governed:
        return Desired.true(CONDITION, "NoPolicy", "no ImagePolicy of the namespace governs the run's images")
    if warnings:
        return Desired.true(CONDITION, "Warned", "; ".join(warnings)[:MAX_MESSAGE])
    text = "; ".join(f"{i}{at(c.digest)} signed by {', '.join(c.signed_by or ())}" for i, c in governed)
    return Desired.true(CONDITION, "Verified", text[:MAX_MESSAGE])


def pinned(image: str, digest: str) -> str:
    try:
        return parse(image).pinned(digest)
    except ReferenceError:  # never resolved, so never reached
        return image


def at(digest: str | None) -> str:
    return f" ({digest[:19]}…)" if digest else ""
