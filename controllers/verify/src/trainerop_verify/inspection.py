"""One image read from its registry and its signatures judged against the governing policies
(the I/O of decide.Inspection). Accepted verdicts are kept by (digest, keys) for the process's
life: a digest's content never changes, and a run's second look costs no request."""

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trainerop_common.signatures import MAX_LAYERS, SIMPLE_SIGNING, PublicKeyError, Verdict, load_key, signature_tag
from trainerop_common.signatures import verify as verify_signatures

from .decide import Inspection
from .metrics import IMAGE_CHECKS
from .policy import Policy
from .references import Location, Reference, location
from .registry import Registry, RegistryError

if TYPE_CHECKING:
    from securesystemslib.signer import SSlibKey

MAX_ACCEPTED = 4096  # verdicts kept (digest, keys)
UNSIGNED = "it has no cosign signature (no {tag} in its repository)"

VerdictKey = tuple[str, tuple[tuple[str, str], ...]]


class Inspector:
    def __init__(self, registry: Registry, mirrors: Mapping[str, str]) -> None:
        self.registry = registry
        self.mirrors = mirrors
        self.accepted: OrderedDict[VerdictKey, Verdict] = OrderedDict()

    async def inspect(self, ref: Reference, policies: Sequence[Policy], digest: str | None) -> Inspection:
        """``digest``: the one the run was let through with (kept for the whole run, so a tag moved
        since changes nothing: that digest is checked against today's policies); else the tag is
        resolved now."""
        where = location(ref, self.mirrors)
        try:
            digest = digest or ref.digest or await self.registry.digest(where, ref.tag or "latest")
            known = {p.name: self.accepted.get((digest, p.keys)) for p in policies}
            if all(known.values()):
                IMAGE_CHECKS.labels("cached").inc()
                return Inspection(digest, {name: v for name, v in known.items() if v is not None})
            verdicts = await self._judge(where, digest, policies)
        except RegistryError as err:
            IMAGE_CHECKS.labels("unreachable" if err.retry else "refused").inc()
            return Inspection(digest, failure=str(err), retry=err.retry)
        for policy in policies:
            if verdicts[policy.name].signed_by is not None:
                self._keep((digest, policy.keys), verdicts[policy.name])
        refused = any(v.signed_by is None for v in verdicts.values())
        IMAGE_CHECKS.labels("refused" if refused else "accepted").inc()
        return Inspection(digest, verdicts)

    async def _judge(self, where: Location, digest: str, policies: Sequence[Policy]) -> dict[str, Verdict]:
        tag = signature_tag(digest)
        manifest = await self.registry.manifest(where, tag)
        if manifest is None:
            return {p.name: Verdict(None, UNSIGNED.format(tag=tag)) for p in policies}
        blobs = await self._payloads(where, manifest)
        return {p.name: judged(manifest, blobs, p, digest) for p in policies}

    async def _payloads(self, where: Location, manifest: Mapping[str, Any]) -> dict[str, bytes]:
        """The signature layers' bytes (checked against their digests by the verdict)."""
        layers = [layer for layer in manifest.get("layers") or () if layer.get("mediaType") == SIMPLE_SIGNING]
        digests = [str(layer.get("digest", "")) for layer in layers[:MAX_LAYERS]]
        return {d: await self.registry.blob(where, d) for d in dict.fromkeys(digests) if d.startswith("sha256:")}

    def _keep(self, key: VerdictKey, verdict: Verdict) -> None:
        self.accepted[key] = verdict
        self.accepted.move_to_end(key)
        while len(self.accepted) > MAX_ACCEPTED:
            self.accepted.popitem(last=False)


def judged(manifest: Mapping[str, Any], blobs: Mapping[str, bytes], policy: Policy, digest: str) -> Verdict:
    try:
        keys = policy_keys(policy)
    except PublicKeyError as err:
        return Verdict(None, str(err))
    return verify_signatures(manifest, lambda d: blobs.get(d, b""), keys, digest)


def policy_keys(policy: Policy) -> list["SSlibKey"]:
    return [load_key(name, pem.encode()) for name, pem in policy.keys]
