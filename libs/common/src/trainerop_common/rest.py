"""The requests a controller sends most (creates, status applies, deletes), straight over aiohttp.

lightkube's client (httpx with anyio's TLS streams, typed models) spent about 0.85 ms of CPU on
each request here, aiohttp 0.27 ms (docs/design/performance.md): at 1000 Trainers the controllers
send tens of thousands of them on a machine whose cores the API server needs. This path sends a
prepared JSON body and reads only what its caller needs; every other call stays with lightkube.
Refusals are raised as lightkube's ``ApiError`` (with the API server's Status), connection
failures as ``ConnectionError``, so callers handle both paths alike.

It authenticates as lightkube would from the same configuration: a client certificate, a bearer
token, or a token file (in a pod: read again when the API server answers 401, as the kubelet
rotates it). A configuration it cannot serve (exec plugins, basic auth) returns no transport, and
the controller sends everything through lightkube.
"""

import ssl
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
from lightkube import ApiError
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import SingleConfig
from lightkube.core.internal_models import meta_v1

CONNECTIONS = 64  # kept open to the API server; a controller has at most a few dozen requests in flight
SECONDS = 10.0  # to connect, and between bytes of an answer: lightkube's (httpx's) timeout
JSON = "application/json"
APPLY = "application/apply-patch+yaml"  # a JSON body is valid YAML


@dataclass
class Token:
    """A bearer token, from the configuration or (in a pod) from its file."""

    value: str | None = None
    file: str | None = None

    def header(self) -> dict[str, str]:
        if self.value is None and self.file is not None:
            self.value = Path(self.file).read_text()
        value = (self.value or "").strip()
        return {"Authorization": f"Bearer {value}"} if value else {}

    def renewed(self, sent: dict[str, str]) -> bool:
        """After a 401 to a request that carried ``sent``: whether another token is there to try (the
        file read again, or already read again for another request refused meanwhile)."""
        if self.file is not None and self.header() == sent:
            self.value = None  # rotated by the kubelet: read it again
        return self.header() != sent


def proxy_for(server: str) -> str | None:
    """The proxy the environment names for ``server`` (HTTPS_PROXY / HTTP_PROXY, unless NO_PROXY
    covers it), as lightkube's client honours them; read once, not on every request."""
    url = urlsplit(server)
    if urllib.request.proxy_bypass(url.hostname or ""):  # the environment's NO_PROXY on Linux
        return None
    return urllib.request.getproxies_environment().get(url.scheme or "https")


def refusal(status: int, body: bytes) -> ApiError:
    """The API server's refusal as lightkube reports it (a Status; a bare body when it sent none)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict) or parsed.get("kind") != "Status":
        parsed = {"code": status, "message": body[:500].decode(errors="replace") or f"HTTP {status}"}
    parsed.setdefault("code", status)
    return ApiError(status=meta_v1.Status.from_dict(parsed))


class Rest:
    """One aiohttp session to the API server for the hot requests (see the module's docstring)."""

    def __init__(self, server: str, tls: ssl.SSLContext | None, token: Token, timeout: float = SECONDS) -> None:
        self._server = server.rstrip("/")
        self._tls = tls
        self._token = token
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._proxy = proxy_for(server)

    @classmethod
    def from_config(cls, config: SingleConfig) -> "Rest | None":
        """For a configuration this path can authenticate with; None for the others."""
        user = config.user
        if user is None or user.exec or user.auth_provider or (user.username and user.password):
            return None
        secure = config.cluster.server.startswith("https")
        tls = verify_cluster(config.cluster, user, config.abs_file) if secure else None
        return cls(config.cluster.server, tls, Token(user.token, user.token_file))

    def _open(self) -> aiohttp.ClientSession:
        if self._closed:  # the controller is stopping: no new session that nobody would close
            raise ConnectionError("the API client is closed")
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._tls if self._tls is not None else False, limit=CONNECTIONS)
            # not trust_env: aiohttp would read ~/.netrc on every request; the proxy is proxy_for's
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._session

    async def send(
        self,
        method: str,
        path: str,
        params: dict[str, str],
        body: Any = None,
        content_type: str = JSON,
        accept: str = JSON,
    ) -> dict[str, Any]:
        """The response's object (``{}`` when it has none); ApiError for a refusal."""
        data = orjson.dumps(body) if body is not None else None
        sent = self._token.header()
        status, raw = await self._exchange(method, path, params, data, content_type, sent | {"Accept": accept})
        if status == 401 and self._token.renewed(sent):
            auth = self._token.header() | {"Accept": accept}
            status, raw = await self._exchange(method, path, params, data, content_type, auth)
        if status >= 400:
            raise refusal(status, raw)
        parsed = orjson.loads(raw) if raw else {}
        return parsed if isinstance(parsed, dict) else {}

    async def _exchange(
        self,
        method: str,
        path: str,
        params: dict[str, str],
        data: bytes | None,
        content_type: str,
        headers: dict[str, str],
    ) -> tuple[int, bytes]:
        """One request; ``headers`` says what it accepts and with which authorization."""
        headers = dict(headers)
        if data is not None:
            headers["Content-Type"] = content_type
        try:
            async with self._open().request(
                method, self._server + path, params=params, data=data, headers=headers, proxy=self._proxy
            ) as response:
                return response.status, await response.read()
        except aiohttp.ClientError as err:  # not all of them are OSErrors: callers retry ConnectionError
            raise ConnectionError(f"{method} {path}: {err}") from err
        except TimeoutError as err:
            raise TimeoutError(f"{method} {path}: no answer within {self._timeout.sock_read}s") from err

    async def close(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()
