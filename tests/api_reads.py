"""The tests' reads (`Cluster.get`, `Cluster.names`) straight from the API server over one kept-alive
HTTPS connection per kubeconfig, with kubectl's names for kinds (found by discovery, as kubectl
finds them). A `kubectl get` is a process of its own — about 50 ms of CPU and a TLS handshake with
the API server each time — and the tests poll every 0.25 s: on two cores, polls of two workers
took a good part of the integration tier's CPU (issue 50). What a read answers is what
`kubectl get -o json` prints (managed fields left out unless asked for), and a refusal raises
`KubectlError` with kubectl's words (``Error from server (NotFound): ...``)."""

from __future__ import annotations

import base64
import ssl
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

TIMEOUT = 30.0


@dataclass(frozen=True)
class Resource:
    prefix: str  # /api/v1 or /apis/GROUP/VERSION
    plural: str
    namespaced: bool

    def path(self, namespace: str | None, name: str | None = None) -> str:
        where = f"/namespaces/{namespace}" if self.namespaced and namespace else ""
        return f"{self.prefix}{where}/{self.plural}" + (f"/{name}" if name else "")


def names_of(entry: dict[str, Any], group: str) -> list[str]:
    """What kubectl accepts for one discovered resource: its plural, singular, kind, short names,
    each also qualified by its group (``leases.coordination.k8s.io``)."""
    plain = [entry["name"], entry.get("singularName") or "", entry["kind"].lower(), *entry.get("shortNames", ())]
    plain = [n for n in plain if n]
    return plain + [f"{n}.{group}" for n in plain if group]


def resources(listings: list[tuple[str, str, dict[str, Any]]]) -> dict[str, Resource]:
    """name -> resource over (prefix, group, resource list) in discovery order: the first wins, as
    in kubectl (the core group, then the groups in the API server's order)."""
    out: dict[str, Resource] = {}
    for prefix, group, listing in listings:
        for entry in listing.get("resources", ()):
            if "/" in entry["name"]:  # a subresource
                continue
            found = Resource(prefix, entry["name"], bool(entry.get("namespaced")))
            for name in names_of(entry, group):
                out.setdefault(name, found)
    return out


class UnreadableConfigError(Exception):
    """A kubeconfig this module does not read (an exec plugin, say): the caller uses kubectl."""


def _file(user_or_cluster: dict[str, Any], key: str) -> str | None:
    """The path of ``key`` (a path, or ``key-data`` written to a file of its own)."""
    if path := user_or_cluster.get(key):
        return str(path)
    if data := user_or_cluster.get(f"{key}-data"):
        with tempfile.NamedTemporaryFile(prefix=f"api-reads-{key}-", delete=False) as target:
            target.write(base64.b64decode(data))
        return target.name
    return None


def http_client(kubeconfig: Path) -> tuple[httpx.Client, str]:
    """(a client of the kubeconfig's current context, its default namespace)."""
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    server = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    if set(user) - {"client-certificate", "client-key", "client-certificate-data", "client-key-data", "token"}:
        raise UnreadableConfigError(f"the kubeconfig's user has {sorted(user)}")
    tls = ssl.create_default_context(cafile=_file(server, "certificate-authority"))
    cert, key = _file(user, "client-certificate"), _file(user, "client-key")
    if cert and key:
        tls.load_cert_chain(cert, key)
    headers = {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}
    client = httpx.Client(base_url=server["server"], verify=tls, headers=headers, timeout=TIMEOUT)
    return client, context.get("namespace") or "default"


class ReadError(Exception):
    """A read refused or not made, in kubectl's words (``Error from server (NotFound): ...``)."""


class Reader:
    """Reads of one kubeconfig's cluster; the connection and the kinds are found again after a
    failure (a cluster brought up again has other certificates, a CRD installed since is new)."""

    def __init__(self, kubeconfig: Path, client: httpx.Client, namespace: str) -> None:
        self.kubeconfig = kubeconfig
        self.lock = threading.Lock()
        self.client: httpx.Client | None = client
        self.namespace = namespace
        self.kinds: dict[str, Resource] = {}

    def get(self, kind: str, name: str, namespace: str | None, managed_fields: bool = False) -> dict[str, Any]:
        found = self.resource(kind)
        obj: dict[str, Any] = self.call(found.path(namespace or self.namespace, name))
        if not managed_fields:
            obj.get("metadata", {}).pop("managedFields", None)
        return obj

    def names(self, kind: str, namespace: str | None) -> set[str]:
        listing = self.call(self.resource(kind).path(namespace or self.namespace))
        return {item["metadata"]["name"] for item in listing.get("items", ())}

    def resource(self, kind: str) -> Resource:
        key = kind.lower()
        if key not in self.kinds:
            self.kinds = self.discover()
        if key not in self.kinds and (versioned := self.versioned(key)) is not None:
            return versioned
        if key not in self.kinds:
            raise ReadError(f'error: the server doesn\'t have a resource type "{kind}"')
        return self.kinds[key]

    def versioned(self, key: str) -> Resource | None:
        """``RESOURCE.VERSION.GROUP`` (``trainers.v1alpha1.trainer.operator.kubeflow.org``): that
        version, preferred or not."""
        parts = key.split(".")
        if len(parts) < 3:
            return None
        name, version, group = parts[0], parts[1], ".".join(parts[2:])
        try:
            listing = self.call(f"/apis/{group}/{version}")
        except ReadError:
            return None
        return resources([(f"/apis/{group}/{version}", "", listing)]).get(name)

    def discover(self) -> dict[str, Resource]:
        listings = [("/api/v1", "", self.call("/api/v1"))]
        for group in self.call("/apis").get("groups", ()):
            version = group["preferredVersion"]["groupVersion"]
            listings.append((f"/apis/{version}", group["name"], self.call(f"/apis/{version}")))
        return resources(listings)

    def call(self, path: str) -> Any:
        with self.lock:
            if self.client is None:
                self.client, self.namespace = http_client(self.kubeconfig)
            client = self.client
        try:
            response = client.get(path)
        except httpx.TransportError as err:
            with self.lock:
                self.client = None
            raise ReadError(f"Unable to connect to the server: {err}") from err
        if response.status_code >= 400:
            raise ReadError(refusal(response))
        return response.json()


def refusal(response: httpx.Response) -> str:
    """kubectl's line for a refused request."""
    try:
        status = response.json()
    except ValueError:
        return f"Error from server: {response.status_code} {response.text.strip()}"
    return f"Error from server ({status.get('reason') or response.status_code}): {status.get('message', '')}"


_READERS: dict[Path, Reader | None] = {}
_READERS_LOCK = threading.Lock()


def reader(kubeconfig: Path) -> Reader | None:
    """The reader of ``kubeconfig`` (one a process), or None when it cannot be read here."""
    with _READERS_LOCK:
        if kubeconfig not in _READERS:
            try:
                client, namespace = http_client(kubeconfig)
            except OSError:  # not there yet (kubectl would fail alike): not remembered
                return None
            except (UnreadableConfigError, KeyError, StopIteration, ValueError):
                _READERS[kubeconfig] = None
            else:
                _READERS[kubeconfig] = Reader(kubeconfig, client, namespace)
        return _READERS[kubeconfig]
