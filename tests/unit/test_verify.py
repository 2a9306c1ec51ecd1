"""The verify controller's pure parts: references as runtimes read them, where a mirror keeps
them, which policies govern an image, the run's images, and the gate's decision."""

import asyncio
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.factories import trainer_spec
from trainerop_common.signatures import Verdict
from trainerop_verify.decide import Decision, Inspection, Observed, decide
from trainerop_verify.policy import Policy, fingerprint, run_images
from trainerop_verify.references import Location, Reference, ReferenceError, location, parse, parse_mirrors
from trainerop_verify.registry import Registry, RegistryError, challenge, whole

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64


@pytest.mark.parametrize(
    ("ref", "registry", "repository", "tag", "digest"),
    [
        ("jax", "docker.io", "library/jax", "latest", None),
        ("jax:dev", "docker.io", "library/jax", "dev", None),
        ("team/jax:1.2", "docker.io", "team/jax", "1.2", None),
        ("docker.io/library/jax:dev", "docker.io", "library/jax", "dev", None),
        ("index.docker.io/team/jax", "docker.io", "team/jax", "latest", None),
        ("registry.k8s.io/pause:3.10", "registry.k8s.io", "pause", "3.10", None),
        ("localhost/x", "localhost", "x", "latest", None),
        ("10.0.0.5:5000/a/b:v1", "10.0.0.5:5000", "a/b", "v1", None),
        (f"jax@{D1}", "docker.io", "library/jax", None, D1),
        (f"ghcr.io/o/jax:dev@{D1}", "ghcr.io", "o/jax", "dev", D1),
        ("Registry.Corp.IO/team/x:v1", "registry.corp.io", "team/x", "v1", None),  # a host: any case
        ("registry.corp.io:443/team/x", "registry.corp.io", "team/x", "latest", None),  # HTTPS's own port
        ("Index.Docker.io/team/x", "docker.io", "team/x", "latest", None),
    ],
)
def test_references_read_as_a_runtime_reads_them(
    ref: str, registry: str, repository: str, tag: str | None, digest: str | None
) -> None:
    assert parse(ref) == Reference(registry, repository, tag, digest)


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("Jax:dev", "not a repository name"),
        ("jax:-dev", "is not a tag"),
        ("jax@sha256:abc", "64 lowercase hex"),
        ("a//b", "not a repository name"),
    ],
)
def test_a_reference_no_runtime_pulls_is_named(ref: str, says: str) -> None:
    with pytest.raises(ReferenceError, match=says):
        parse(ref)


def test_an_image_is_pinned_by_its_full_name_and_digest() -> None:
    assert parse("jax:dev").pinned(D1) == f"docker.io/library/jax@{D1}"


@pytest.mark.parametrize(
    ("text", "ref", "where"),
    [
        ("", "jax:dev", Location("registry-1.docker.io", "library/jax")),
        ("", "ghcr.io/o/jax", Location("ghcr.io", "o/jax")),
        ("docker.io=10.0.0.5:5000/docker.io", "jax:dev", Location("10.0.0.5:5000", "docker.io/library/jax")),
        ("docker.io=mirror.local", "team/x", Location("mirror.local", "team/x")),
        ("docker.io=m:1/docker.io, ghcr.io=m:1/ghcr.io/", "ghcr.io/o/x", Location("m:1", "ghcr.io/o/x")),
    ],
)
def test_a_mirrored_registry_is_read_where_the_mirror_keeps_it(text: str, ref: str, where: Location) -> None:
    assert location(parse(ref), parse_mirrors(text)) == where


@pytest.mark.parametrize("text", ["docker.io", "=m:1", "docker.io="])
def test_a_mirror_written_wrong_says_how_to_write_it(text: str) -> None:
    with pytest.raises(ValueError, match="write <registry>=<host"):
        parse_mirrors(text)


def policy(name: str = "signed", mode: Any = "Enforce", globs: tuple[str, ...] = ("*",)) -> Policy:
    return Policy(name, mode, globs, (("team", "PEM"),))


@pytest.mark.parametrize(
    ("globs", "name", "governs"),
    [
        (("*",), "docker.io/library/jax", True),
        (("docker.io/team/*",), "docker.io/team/sub/jax", True),  # '*' crosses '/'
        (("docker.io/team/*",), "docker.io/library/jax", False),
        (("ghcr.io/o/jax",), "ghcr.io/o/jax", True),
        (("ghcr.io/o/jax",), "ghcr.io/o/jax2", False),
    ],
)
def test_a_policy_governs_the_names_its_globs_match(globs: tuple[str, ...], name: str, governs: bool) -> None:
    assert policy(globs=globs).governs(name) is governs


def test_a_changed_policy_changes_the_fingerprint() -> None:
    assert fingerprint([policy()]) == fingerprint([policy()])
    assert fingerprint([policy()]) != fingerprint([policy(mode="Warn")])
    assert fingerprint([policy("a"), policy("b")]) == fingerprint([policy("b"), policy("a")])


def test_a_registry_written_otherwise_is_governed_all_the_same() -> None:
    """A policy over registry.corp.io/* governs the image however its host is written: no way
    past it by case or by the default port."""
    strict = policy(globs=("registry.corp.io/*",))
    for image in ("Registry.Corp.io/team/x:v1", "registry.corp.io:443/team/x:v1"):
        decision = judge({image: Inspection(D1, unsigned())}, (strict,), images=(image,))
        assert decision.conditions[0].reason == "Unschedulable", image


def test_too_many_images_are_refused_not_truncated() -> None:
    images = tuple(f"img{i}:1" for i in range(33))
    decision = judge({}, images=images)
    assert decision.conditions[0].reason == "Unschedulable"
    assert "names 33 images; ImagePolicies check at most 32" in decision.conditions[0].message
    assert judge({}, policies=(), images=images).conditions[0].reason == "NoPolicy"


def test_the_run_images_are_its_own_and_its_roles_overrides() -> None:
    spec = trainer_spec(
        image="jax:dev",
        topology={"workers": 2},
        podTemplateOverrides={
            "worker": {
                "spec": {
                    "containers": [{"name": "jax", "image": "jax:other"}, {"name": "side", "image": "sidecar:1"}],
                    "initContainers": [{"name": "warm", "image": "jax:dev"}, {"name": "none"}],
                    "volumes": [{"name": "data", "image": {"reference": "dataset:7"}}, {"name": "empty"}],
                }
            },
            "parameterServer": {"spec": {"containers": [{"name": "ps", "image": "unused:1"}]}},  # no such role
        },
    )
    assert run_images(spec) == ("dataset:7", "jax:dev", "jax:other", "sidecar:1")


SIGNED = {"signed": Verdict("team", "signed by team")}


def unsigned(policy_name: str = "signed") -> dict[str, Verdict]:
    return {policy_name: Verdict(None, "it has no cosign signature (no sha256-1111.sig in its repository)")}


def judge(
    inspections: dict[str, Inspection],
    policies: tuple[Policy, ...] = (policy(),),
    images: tuple[str, ...] = ("jax:dev",),
) -> Decision:
    return decide(Observed(3, images, policies, inspections, "fp"))


CASES: list[tuple[str, tuple[Policy, ...], dict[str, Inspection], str, str, str]] = [
    # (what, policies, inspections of jax:dev, condition status, reason, words in the message)
    ("no policy", (), {}, "True", "NoPolicy", "no ImagePolicy"),
    ("not governed", (policy(globs=("ghcr.io/*",)),), {}, "True", "NoPolicy", "governs"),
    ("signed", (policy(),), {"jax:dev": Inspection(D1, SIGNED)}, "True", "Verified", "signed by team"),
    ("unsigned", (policy(),), {"jax:dev": Inspection(D1, unsigned())}, "False", "Unschedulable", "no cosign signature"),
    (
        "other key",
        (policy(),),
        {"jax:dev": Inspection(D1, {"signed": Verdict(None, "it is signed, but by none of the policy's keys")})},
        "False",
        "Unschedulable",
        "by none of the policy's keys (ImagePolicy 'signed' (Enforce))",
    ),
    (
        "tag moved",
        (policy(),),
        {"jax:dev": Inspection(D2, {"signed": Verdict(None, f"signed by team for {D1}, not for {D2}: the tag moved")})},
        "False",
        "Unschedulable",
        "the tag moved",
    ),
    (
        "no such tag",
        (policy(),),
        {"jax:dev": Inspection(failure="r:5000 has no library/jax:dev")},
        "False",
        "Unschedulable",
        "has no library/jax:dev",
    ),
    (
        "registry down",
        (policy(),),
        {"jax:dev": Inspection(failure="r:5000 did not answer", retry=True)},
        "False",
        "RegistryUnavailable",
        "r:5000 did not answer; asked again with backoff (the run waits, with no pods)",
    ),
    ("warn only", (policy(mode="Warn"),), {"jax:dev": Inspection(D1, unsigned())}, "True", "Warned", "Warn"),
    (
        "warn and enforce",
        (policy("a"), policy("b", mode="Warn")),
        {"jax:dev": Inspection(D1, {"a": Verdict("team", "signed by team"), **unsigned("b")})},
        "True",
        "Warned",
        "ImagePolicy 'b' (Warn)",
    ),
    (
        "two policies, one refuses",
        (policy("a"), policy("b")),
        {"jax:dev": Inspection(D1, {"a": Verdict("team", "signed by team"), **unsigned("b")})},
        "False",
        "Unschedulable",
        "ImagePolicy 'b' (Enforce)",
    ),
    (
        "down, warn only",
        (policy(mode="Warn"),),
        {"jax:dev": Inspection(failure="down", retry=True)},
        "True",
        "Warned",
        "down",
    ),
]


@pytest.mark.parametrize(("what", "policies", "seen", "status", "reason", "words"), CASES, ids=[c[0] for c in CASES])
def test_the_gate_opens_only_for_signed_images(
    what: str, policies: tuple[Policy, ...], seen: dict[str, Inspection], status: str, reason: str, words: str
) -> None:
    decision = judge(seen, policies)
    (condition,) = decision.conditions
    assert (condition.type, condition.status, condition.reason) == ("ImagesVerified", status, reason)
    assert words in condition.message
    assert (decision.problem is not None) == (status == "False")  # an Event once per refusal
    assert decision.retry == (reason == "RegistryUnavailable")
    assert decision.refused == (reason == "Unschedulable")
    assert bool(decision.warnings) == (reason == "Warned")


def test_the_checked_digests_become_the_pods_images() -> None:
    decision = judge({"jax:dev": Inspection(D1, SIGNED)})
    section = decision.status["verify"]
    assert section["contribution"] == {"generation": 3, "pod": {"images": {"jax:dev": f"docker.io/library/jax@{D1}"}}}
    assert section["images"] == [{"image": "jax:dev", "digest": D1, "signedBy": ["team"], "policies": ["signed"]}]
    assert (section["generation"], section["policies"]) == (3, "fp")


def test_a_refusal_names_the_image_and_its_digest() -> None:
    decision = judge({"jax:dev": Inspection(D1, unsigned())})
    assert decision.conditions[0].message.startswith(f"image jax:dev ({D1[:19]}…): it has no cosign signature")
    assert decision.status["verify"]["images"][0]["problem"].endswith("(ImagePolicy 'signed' (Enforce))")


def test_an_unreadable_reference_is_refused_by_an_enforce_policy() -> None:
    decision = judge({}, images=("Bad:Name",))
    assert decision.conditions[0].reason == "Unschedulable"
    assert "not a repository name" in decision.conditions[0].message
    assert "contribution" not in decision.status["verify"]


def test_an_image_not_inspected_yet_is_waited_for() -> None:
    decision = judge({})
    assert (decision.conditions[0].reason, decision.retry) == ("RegistryUnavailable", True)


@pytest.mark.parametrize(
    ("header", "params"),
    [
        (
            'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/jax:pull"',
            {
                "realm": "https://auth.docker.io/token",
                "service": "registry.docker.io",
                "scope": "repository:library/jax:pull",
            },
        ),
        ('bearer realm="https://ghcr.io/token"', {"realm": "https://ghcr.io/token"}),
        ('Basic realm="registry"', None),
        ("", None),
    ],
)
def test_a_registry_that_asks_for_a_token_says_where_to_get_it(header: str, params: dict[str, str] | None) -> None:
    assert challenge(header) == params


async def test_a_registry_body_is_read_to_its_end_however_it_arrives() -> None:
    """A manifest sent in pieces (chunked, a pause between them) is read whole, and one past the
    limit is refused, not cut."""
    payload = b'{"layers": [' + b" " * 100_000 + b"]}"

    async def pieces(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for start in range(0, len(payload), 30_000):
            await response.write(payload[start : start + 30_000])
            await asyncio.sleep(0.01)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/m", pieces)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/m") as response:
            assert await whole(response, "m", len(payload)) == payload
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/m") as response:
            with pytest.raises(RegistryError, match="larger than 1000 bytes"):
                await whole(response, "m", 1000)
    finally:
        await runner.cleanup()


async def test_a_token_is_asked_of_an_https_realm_only() -> None:
    with pytest.raises(RegistryError, match="which is not HTTPS") as refused:
        await Registry("", 1.0)._token({"realm": "http://10.0.0.1/token"}, Location("r.example", "team/x"))
    assert refused.value.retry is False
