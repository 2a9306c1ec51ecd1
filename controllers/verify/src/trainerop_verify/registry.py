"""The registry API the verify controller reads (the OCI distribution spec over HTTPS): a tag's
digest, cosign's signature manifest, and its payload blobs. Anonymous pulls, with the bearer-token
handshake public registries ask for (``WWW-Authenticate: Bearer realm=…``)."""

import json
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from .metrics import REGISTRY_SECONDS
from .references import DIGEST, Location

# A tag may name any of these; the digest a runtime pulls is that of what the registry returns.
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
MAX_MANIFEST = 4 << 20  # bytes: the distribution registry's own limit
MAX_PAYLOAD = 1 << 20  # a simple-signing payload is a few hundred bytes
CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


class RegistryError(Exception):
    """The registry did not answer, or not as the spec says (``retry``) — or the image is not there."""

    def __init__(self, message: str, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes


def challenge(header: str) -> dict[str, str] | None:
    """The parameters of a ``Bearer`` challenge (realm, service, scope), None for any other."""
    scheme, _, params = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return dict(CHALLENGE_PARAM.findall(params))


class Registry:
    def __init__(self, ca_file: str, timeout: float) -> None:
        self.context = ssl.create_default_context()
        if ca_file and Path(ca_file).read_text().strip():  # an empty bundle: the system's CAs only
            self.context.load_verify_locations(cafile=ca_file)
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.session: aiohttp.ClientSession | None = None
        self.tokens: dict[tuple[str, str], str] = {}  # (host, repository) -> bearer token

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def digest(self, where: Location, tag: str) -> str:
        """What the tag names now (``HEAD``, every manifest type accepted: ``Docker-Content-Digest``)."""
        with REGISTRY_SECONDS.labels("digest").time():
            answer = await self.get(where, f"manifests/{tag}", ", ".join(MANIFEST_TYPES), head=True)
        if answer.status == 404:
            raise RegistryError(f"{where.host} has no {where.repository}:{tag}", retry=False)
        digest = answer.headers.get("Docker-Content-Digest", "")
        if answer.status != 200 or not DIGEST.match(digest):
            raise RegistryError(f"{where.host} answered {answer.status} for the tag {tag} without a digest", True)
        return digest

    async def manifest(self, where: Location, reference: str) -> dict[str, Any] | None:
        """An OCI manifest (None: there is none of that name)."""
        with REGISTRY_SECONDS.labels("signatures").time():
            answer = await self.get(where, f"manifests/{reference}", ", ".join(MANIFEST_TYPES), limit=MAX_MANIFEST)
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise RegistryError(f"{where.host} answered {answer.status} for the manifest {reference}", retry=True)
        try:
            found = json.loads(answer.body)
        except ValueError:
            raise RegistryError(f"{where.host} sent a manifest {reference} that is not JSON", retry=True) from None
        return found if isinstance(found, dict) else None

    async def blob(self, where: Location, digest: str) -> bytes:
        with REGISTRY_SECONDS.labels("payload").time():
            answer = await self.get(where, f"blobs/{digest}", "*/*", limit=MAX_PAYLOAD)
        if answer.status != 200:
            raise RegistryError(f"{where.host} answered {answer.status} for the blob {digest}", retry=True)
        return answer.body

    async def get(self, where: Location, path: str, accept: str, head: bool = False, limit: int = 0) -> Answer:
        """One request, once more with a token if the registry asks for one."""
        answer = await self._send(where, path, accept, head, limit)
        asked = challenge(answer.headers.get("WWW-Authenticate", "")) if answer.status == 401 else None
        if asked is not None and asked.get("realm"):
            self.tokens[(where.host, where.repository)] = await self._token(asked, where)
            answer = await self._send(where, path, accept, head, limit)
        if answer.status in (401, 403):
            raise RegistryError(f"{where.host} refused an anonymous pull of {where.repository}", retry=False)
        return answer

    async def _send(self, where: Location, path: str, accept: str, head: bool, limit: int) -> Answer:
        headers = {"Accept": accept}
        token = self.tokens.get((where.host, where.repository))
        if token:
            headers["Authorization"] = f"Bearer {token}"
        url = f"https://{where.host}/v2/{where.repository}/{path}"
        try:
            async with self._session().request("HEAD" if head else "GET", url, headers=headers) as response:
                body = b"" if head or response.status != 200 else await whole(response, url, limit)
                return Answer(response.status, dict(response.headers), body)
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            raise RegistryError(f"{where.host} did not answer ({type(err).__name__}: {err})", retry=True) from None

    async def _token(self, asked: Mapping[str, str], where: Location) -> str:
        """An anonymous pull token from the realm the registry names (HTTPS only, no redirects:
        the realm is the registry's word, and the controller fetches nothing else on it)."""
        realm = asked["realm"]
        if not realm.startswith("https://"):
            raise RegistryError(f"{where.host} asks for a token from {realm}, which is not HTTPS", retry=False)
        params = {
            "service": asked.get("service", ""),
            "scope": asked.get("scope", f"repository:{where.repository}:pull"),
        }
        try:
            async with self._session().get(realm, params=params, allow_redirects=False) as response:
                status = response.status
                found = await response.json(content_type=None) if status == 200 else {}
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as err:
            raise RegistryError(f"{realm} gave no token ({type(err).__name__}: {err})", retry=True) from None
        token = found.get("token") or found.get("access_token") if isinstance(found, dict) else None
        if not isinstance(token, str):
            said_no = status in (200, 401, 403)  # it answered, without a token: asking again changes nothing
            raise RegistryError(f"{realm} gave no token for {where.repository} ({status})", retry=not said_no)
        return token

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            self.session = aiohttp.ClientSession(timeout=self.timeout, connector=aiohttp.TCPConnector(ssl=self.context))
        return self.session


async def whole(response: aiohttp.ClientResponse, url: str, limit: int) -> bytes:
    """The whole body, to its end (one read returns what has arrived so far), of at most ``limit`` bytes."""
    body = bytearray()
    async for chunk in response.content.iter_chunked(1 << 16):
        body += chunk
        if limit and len(body) > limit:
            raise RegistryError(f"{url} is larger than {limit} bytes", retry=False)
    return bytes(body)
