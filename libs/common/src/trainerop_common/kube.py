"""The thin I/O adapter every controller uses for its own API calls (kopf does the watching).

Wraps lightkube's async client with the project's CRDs as generic resources and a client-side
rate limit; the requests sent most (creates, status applies, deletes) go over aiohttp
(:mod:`.rest`) when the configuration allows. Only this module and ``rest`` talk HTTP; decision
code stays pure.
"""

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal

import httpx2
from lightkube import ApiError, AsyncClient, operators
from lightkube.config.kubeconfig import KubeConfig
from lightkube.core.resource import NamespacedResource, NamespacedSubResource, api_info
from lightkube.generic_resource import (
    GenericGlobalResource,
    GenericNamespacedResource,
    create_global_resource,
    create_namespaced_resource,
)
from lightkube.resources.admissionregistration_v1 import (
    MutatingWebhookConfiguration,
    ValidatingWebhookConfiguration,
)
from lightkube.resources.authentication_v1 import SelfSubjectReview
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import (
    Event,
    Namespace,
    Node,
    PersistentVolumeClaim,
    Pod,
    Secret,
    Service,
    ServiceAccount,
)
from lightkube.resources.policy_v1 import PodDisruptionBudget
from lightkube.resources.rbac_authorization_v1 import Role, RoleBinding
from lightkube.types import PatchType

from .api import KINDS, KUBEFLOW_KINDS, KindInfo
from .metrics import API_ERRORS, API_REQUESTS
from .names import field_manager
from .objects import METADATA_KEEPS, Keep, removed_at_once, slim
from .ratelimit import TokenBucket
from .rest import APPLY, JSON, Rest, refusal

Resource = type[GenericNamespacedResource] | type[GenericGlobalResource]

RESOURCES: dict[str, Resource] = {
    info.kind: (
        create_namespaced_resource(info.group, info.version, info.kind, info.plural)
        if info.scope == "Namespaced"
        else create_global_resource(info.group, info.version, info.kind, info.plural)
    )
    for info in (*KINDS, *KUBEFLOW_KINDS)
} | {  # Kueue's (v0.17's storage version), for the runs it admits
    "Workload": create_namespaced_resource("kueue.x-k8s.io", "v1beta2", "Workload", "workloads"),
    "ResourceFlavor": create_global_resource("kueue.x-k8s.io", "v1beta2", "ResourceFlavor", "resourceflavors"),
    "WorkloadPriorityClass": create_global_resource(
        "kueue.x-k8s.io", "v1beta2", "WorkloadPriorityClass", "workloadpriorityclasses"
    ),
    # the cluster's: a training pod has at most the default one's priority (trainerop_trainer.creations)
    "PriorityClass": create_global_resource("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses"),
    # kopf's: the object replicas coordinate through (deploy/base/kopf-peering-crd.yaml)
    "ClusterKopfPeering": create_global_resource("kopf.dev", "v1", "ClusterKopfPeering", "clusterkopfpeerings"),
}


CORE: dict[str, Any] = {
    "Node": Node,
    "Pod": Pod,
    "Event": Event,
    "Service": Service,
    "Lease": Lease,
    "PersistentVolumeClaim": PersistentVolumeClaim,
    "ServiceAccount": ServiceAccount,
    "Role": Role,
    "RoleBinding": RoleBinding,
    "Secret": Secret,
    "PodDisruptionBudget": PodDisruptionBudget,
}
WEBHOOK_CONFIGURATIONS: dict[str, Any] = {
    "ValidatingWebhookConfiguration": ValidatingWebhookConfiguration,
    "MutatingWebhookConfiguration": MutatingWebhookConfiguration,
}


# Objects per page of a list (kubectl's --chunk-size is 500). A page is held whole while it is read
# and projected, and what a controller's heap grows to for it stays resident: restarted among 1000
# Trainers (4000 pods), the trainer held 151.5 MiB at 500 and 126.5 MiB at 100, the quota
# controller 135.9 and 117.8 (docs/design/performance.md, "Smaller pages").
LIST_PAGE = 100

# Requests made while this is set go ahead of the others waiting for the client's rate limit
# (TokenBucket.acquire(urgent=True)): a started run's recovery does not queue behind the first pods
# of a thousand new Trainers.
URGENT: ContextVar[bool] = ContextVar("urgent", default=False)


@contextmanager
def urgent_requests(urgent: bool = True) -> Iterator[None]:
    """The requests made inside (tasks started inside too) are urgent when ``urgent``."""
    token = URGENT.set(urgent)
    try:
        yield
    finally:
        URGENT.reset(token)


# Ask the API server for an object's metadata only (as `kubectl get --raw` with this Accept does).
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


def resource_path(res: Any, namespace: str | None, name: str | None = None) -> str:
    """The URL path of a lightkube resource class (its collection, or the object ``name``; a
    subresource class such as ``Status`` needs the name)."""
    info = api_info(res)
    base = info.parent or info.resource
    path = f"/apis/{base.group}/{base.version}" if base.group else f"/api/{base.version}"
    if namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{info.plural}"
    if name is not None:
        path += f"/{name}"
    return path + (f"/{info.action}" if info.action else "")


def _selector(text: str) -> dict[str, Any]:
    """``a=b,c`` -> lightkube's label filter (equality and existence only)."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        out[key] = value if sep else operators.exists()
    return out


# What a DELETE did (Kube.delete_core).
Deletion = Literal["gone", "removed", "deleting"]


def is_conflict(err: ApiError) -> bool:
    return bool(err.status.code == 409)


def is_not_found(err: ApiError) -> bool:
    return bool(err.status.code == 404)


def is_forbidden(err: ApiError) -> bool:
    return bool(err.status.code == 403)


def is_namespace_terminating(err: ApiError) -> bool:
    """Refused because the namespace is being deleted (nothing can be created in it any more)."""
    causes = (err.status.details.causes if err.status.details else None) or []
    return is_forbidden(err) and (
        any(c.reason == "NamespaceTerminating" for c in causes) or "being terminated" in (err.status.message or "")
    )


def ca_bundle_patch(webhooks: list[tuple[str, str | None]], bundle: str) -> list[dict[str, Any]]:
    """A JSON patch setting the caBundle of each webhook (name, caBundle) that differs from
    ``bundle``; each is pinned to the name read, so a concurrent reordering fails the patch."""
    patch: list[dict[str, Any]] = []
    for i, (name, current) in enumerate(webhooks):
        if current != bundle:
            patch.append({"op": "test", "path": f"/webhooks/{i}/name", "value": name})
            patch.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle})
    return patch


class Kube:
    """Rate-limited API access for one controller."""

    def __init__(self, client: AsyncClient, bucket: TokenBucket, controller: str, rest: Rest | None = None) -> None:
        self._client = client
        self._bucket = bucket
        self._controller = controller
        self._rest = rest  # the hot requests' path; None: everything through lightkube
        self._manager = {"fieldManager": field_manager(controller)}

    @classmethod
    def from_environment(cls, controller: str, qps: float, burst: int) -> "Kube":
        """In-cluster service account, else $KUBECONFIG / ~/.kube/config."""
        config = KubeConfig.from_env()
        client = AsyncClient(config, field_manager=field_manager(controller))
        single = config.get()
        rest = Rest.from_config(single) if single is not None else None
        return cls(client, TokenBucket(qps, burst), controller, rest)

    async def _call(self, verb: str, coro: Any) -> Any:
        await self._bucket.acquire(urgent=URGENT.get())
        try:
            result = await coro
        except ApiError as err:
            API_REQUESTS.labels(self._controller, verb, str(err.status.code)).inc()
            API_ERRORS.labels(self._controller, verb, str(err.status.code)).inc()
            raise
        except (OSError, TimeoutError, httpx2.TransportError):
            API_ERRORS.labels(self._controller, verb, "connection").inc()
            raise
        API_REQUESTS.labels(self._controller, verb, "ok").inc()
        return result

    async def apply_status(
        self, info: KindInfo, namespace: str | None, name: str, body: dict[str, Any], field_manager: str
    ) -> str | None:
        res = RESOURCES[info.kind]
        if self._rest is not None:
            path = resource_path(res.Status, namespace, name)
            params = {"fieldManager": field_manager, "force": "false"}
            answer = await self._call("apply_status", self._rest.send("PATCH", path, params, body, APPLY))
            version = answer.get("metadata", {}).get("resourceVersion")
            return str(version) if version else None
        result = await self._call(
            "apply_status",
            self._client.patch(
                res.Status,
                name,
                body,
                namespace=namespace,
                patch_type=PatchType.APPLY,
                field_manager=field_manager,
                force=False,
            ),
        )
        version = result.metadata.resourceVersion if result.metadata else None
        return str(version) if version else None

    async def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        """One of the operator's own objects (None: it does not exist)."""
        return await self._get(RESOURCES[kind], name, namespace)

    async def list_in(self, kind: str, namespace: str, keep: Keep = slim) -> list[dict[str, Any]]:
        """Every object of one of the operator's kinds in ``namespace``, each as ``keep`` projects it."""
        return await self._list(RESOURCES[kind], keep, namespace)

    async def _get(self, res: Any, name: str, namespace: str | None) -> dict[str, Any] | None:
        try:
            obj = await self._call("get", self._client.get(res, name, namespace=namespace))
        except ApiError as err:
            if is_not_found(err):
                return None
            raise
        return dict(obj.to_dict())

    async def list_all(self, kind: str, keep: Keep = slim) -> list[dict[str, Any]]:
        """Every object of ``kind`` the controller may see (all namespaces), each as ``keep``
        projects it."""
        res = RESOURCES[kind]
        return await self._list(res, keep, "*" if issubclass(res, NamespacedResource) else None)

    async def _list(self, res: Any, keep: Keep, namespace: str | None = None, labels: str = "") -> list[dict[str, Any]]:
        """A list read in pages of LIST_PAGE (``namespace`` "*": every namespace), each object
        projected by ``keep`` as it arrives: a controller (re)starting at thousands of pods never
        holds them all whole at once. On the aiohttp path the objects are never decoded into
        lightkube's models (at N = 1000 a relist of the trainer's pods held 100 MiB of them), and
        a list for :func:`.objects.metadata_only` (or another of ``METADATA_KEEPS``) asks the API
        server for the metadata alone."""
        if self._rest is not None:
            return await self._list_pages(res, keep, namespace, labels)
        selectors: dict[str, Any] = {"labels": _selector(labels)} if labels else {}
        if namespace is not None:
            selectors["namespace"] = namespace

        async def collect() -> list[dict[str, Any]]:
            return [keep(dict(o.to_dict())) async for o in self._client.list(res, chunk_size=LIST_PAGE, **selectors)]

        result: list[dict[str, Any]] = await self._call("list", collect())
        return result

    async def _list_pages(self, res: Any, keep: Keep, namespace: str | None, labels: str) -> list[dict[str, Any]]:
        assert self._rest is not None
        path = resource_path(res, None if namespace == "*" else namespace)
        accept = METADATA_LIST if keep in METADATA_KEEPS else JSON
        params = {"limit": str(LIST_PAGE)} | ({"labelSelector": labels} if labels else {})
        kept: list[dict[str, Any]] = []
        while True:
            page = await self._call("list", self._rest.send("GET", path, params, accept=accept))
            # Items come without their kind (watch events and lightkube's objects have it).
            kind, api_version = str(page.get("kind", "")).removesuffix("List"), page.get("apiVersion")
            kept.extend(keep({"apiVersion": api_version, "kind": kind, **item}) for item in page.get("items") or ())
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return kept
            params["continue"] = token

    async def secret_exists(self, namespace: str, name: str) -> bool | None:
        """Whether a Secret exists (None: not allowed to look in that namespace). Only its metadata
        is requested: the values never reach the operator, so they cannot leak into its logs,
        Events or status."""
        generic = self._client._client  # lightkube's own request path, with a metadata-only Accept
        try:
            await self._call(
                "get", generic.request("get", Secret, name=name, namespace=namespace, headers={"Accept": METADATA_ONLY})
            )
        except ApiError as err:
            if is_not_found(err):
                return False
            if is_forbidden(err):
                return None
            raise
        return True

    async def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """A Secret's values, decoded (None: it does not exist). For credentials the controller itself
        must use; callers keep them out of logs, Events and status."""
        found = await self.secret_with_version(namespace, name)
        return None if found is None else found[0]

    async def secret_with_version(self, namespace: str, name: str) -> tuple[dict[str, str], str] | None:
        """A Secret's values, decoded, and its resourceVersion (None: it does not exist)."""
        try:
            secret = await self._call("get", self._client.get(Secret, name, namespace=namespace))
        except ApiError as err:
            if is_not_found(err):
                return None
            raise
        data = {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
        return data | dict(secret.stringData or {}), str(secret.metadata.resourceVersion)

    async def fill_secret(self, namespace: str, name: str, data: dict[str, bytes], resource_version: str) -> bool:
        """Write ``data`` into an existing Secret unless it changed since ``resource_version`` was
        read (False: it did; someone else wrote it first). A patch, so that a Role can allow it by
        the Secret's name, which a create cannot."""
        patch = {
            "metadata": {"resourceVersion": resource_version},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }
        try:
            await self._call(
                "patch", self._client.patch(Secret, name, patch, namespace=namespace, patch_type=PatchType.MERGE)
            )
        except ApiError as err:
            if is_conflict(err):
                return False
            raise
        return True

    async def get_namespace_labels(self, name: str) -> dict[str, str] | None:
        try:
            ns = await self._call("get", self._client.get(Namespace, name))
        except ApiError as err:
            if is_not_found(err):
                return None
            raise
        return dict(ns.metadata.labels or {})

    async def list_core(self, kind: str, label_selector: str, keep: Keep = slim) -> list[dict[str, Any]]:
        """Pods or Services in every namespace that match ``label_selector``."""
        return await self._list(CORE[kind], keep, "*", label_selector)

    async def list_core_in(
        self, kind: str, namespace: str, label_selector: str, keep: Keep = slim
    ) -> list[dict[str, Any]]:
        """Objects of a core kind (Pods, Leases) in one namespace that match ``label_selector``."""
        return await self._list(CORE[kind], keep, namespace, label_selector)

    async def apply(self, kind: str, body: dict[str, Any]) -> None:
        """Server-side apply of one of the operator's objects under this controller's field
        manager, taking over the fields another manager set: the object is this controller's to
        shape (a Kubeflow job's Trainer)."""
        meta = body["metadata"]
        await self._call(
            "apply",
            self._client.patch(
                RESOURCES[kind],
                meta["name"],
                body,
                namespace=meta.get("namespace"),
                patch_type=PatchType.APPLY,
                field_manager=field_manager(self._controller),
                force=True,
            ),
        )

    async def merge_patch(
        self, kind: str, namespace: str | None, name: str, patch: dict[str, Any], status: bool = False
    ) -> dict[str, Any] | None:
        """A JSON merge patch of an object (of its status subresource with ``status``); a
        ``metadata.resourceVersion`` in the patch makes it conditional (409 when the object moved
        on). None when the object is gone. ``kind``: one of the operator's, or a core kind."""
        res = RESOURCES[kind] if kind in RESOURCES else CORE[kind]
        try:
            result = await self._call(
                "patch",
                self._client.patch(
                    res.Status if status else res,
                    name,
                    patch,
                    namespace=namespace,
                    patch_type=PatchType.MERGE,
                    field_manager=field_manager(self._controller),
                ),
            )
        except ApiError as err:
            if is_not_found(err):
                return None
            raise
        return dict(result.to_dict())

    async def validating_webhooks(self) -> set[str]:
        """The names of every validating admission webhook registered (of every configuration)."""
        configs = await self._list(ValidatingWebhookConfiguration, lambda o: {"webhooks": o.get("webhooks") or []})
        return {str(hook.get("name")) for config in configs for hook in config["webhooks"]}

    async def apply_core(self, body: dict[str, Any]) -> None:
        """Server-side apply of a namespaced built-in object under this controller's field manager."""
        res = CORE[body["kind"]]
        await self._call(
            "apply",
            self._client.apply(res.from_dict(body), field_manager=field_manager(self._controller)),
        )

    async def list_nodes(self, keep: Keep = slim) -> list[dict[str, Any]]:
        return await self._list(Node, keep)

    async def list_namespaces(self, keep: Keep = slim) -> list[dict[str, Any]]:
        return await self._list(Namespace, keep)

    async def get_core(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A Pod or Service (None: it does not exist)."""
        return await self._get(CORE[kind], name, namespace)

    async def create_core(self, body: dict[str, Any]) -> bool:
        """Create a Pod or Service; False if one of that name exists already."""
        res = CORE[body["kind"]]
        try:
            await self._call("create", self._create(res, body, body.get("metadata", {}).get("namespace")))
        except ApiError as err:
            if is_conflict(err):
                return False
            raise
        return True

    async def delete_core(
        self, kind: str, namespace: str, name: str, force: bool = False, uid: str | None = None
    ) -> Deletion:
        """Delete a Pod or Service: "gone" if it was already, "removed" if this request removed it
        (:func:`.objects.removed_at_once`: e.g. a Failed pod, which has no grace period), else
        "deleting". ``force`` skips the grace period (for a pod whose node is lost and will never
        confirm the deletion). ``uid``: only the object with that UID (the API server's
        precondition, as the kubelet deletes): one made since under the same name (a replacement)
        stays, and the one meant counts as gone."""
        grace = 0 if force else None
        try:
            answer = await self._call("delete", self._delete(CORE[kind], name, namespace, grace, uid))
        except ApiError as err:
            if is_not_found(err) or (uid is not None and is_conflict(err)):
                return "gone"
            raise
        return "removed" if removed_at_once(answer) else "deleting"

    async def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete one of the operator's objects; False if it is already gone."""
        try:
            await self._call("delete", self._delete(RESOURCES[kind], name, namespace))
        except ApiError as err:
            if is_not_found(err):
                return False
            raise
        return True

    async def create(self, kind: str, body: dict[str, Any], namespace: str | None = None) -> bool:
        """Create an object; False if it already exists (creation is idempotent by name)."""
        res = RESOURCES[kind]
        try:
            await self._call("create", self._create(res, body, namespace or body.get("metadata", {}).get("namespace")))
        except ApiError as err:
            if is_conflict(err):
                return False
            raise
        return True

    async def _create(self, res: Any, body: dict[str, Any], namespace: str | None) -> Any:
        if self._rest is None:
            return await self._client.create(res.from_dict(body), namespace=namespace)
        return await self._rest.send("POST", resource_path(res, self._namespace(res, namespace)), self._manager, body)

    async def _delete(
        self, res: Any, name: str, namespace: str | None, grace: int | None = None, uid: str | None = None
    ) -> Any:
        if self._rest is None:
            # lightkube sends no DeleteOptions body: the UID is compared here, just before
            if uid is not None and (await self._client.get(res, name, namespace=namespace)).metadata.uid != uid:
                raise refusal(409, f"{name} is no longer the object with UID {uid}".encode())
            return await self._client.delete(res, name, namespace=namespace, grace_period=grace)
        path = resource_path(res, self._namespace(res, namespace), name)
        if not uid:
            params = {"gracePeriodSeconds": str(grace)} if grace is not None else {}
            return await self._rest.send("DELETE", path, params)
        # With a body the API server reads every option from it and none from the query.
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        return await self._rest.send("DELETE", path, {}, options)

    def _namespace(self, res: Any, namespace: str | None) -> str | None:
        """A namespaced kind's namespace, the configuration's when not given (as lightkube does)."""
        if namespace or not issubclass(res, (NamespacedResource, NamespacedSubResource)):
            return namespace
        return str(self._client.namespace)

    async def inject_ca_bundle(self, kind: str, name: str, ca: bytes) -> str:
        """Set the caBundle of every webhook of one webhook configuration to ``ca``: "written",
        "unchanged", or "missing" (no such configuration)."""
        res = WEBHOOK_CONFIGURATIONS[kind]
        try:
            config = await self._call("get", self._client.get(res, name))
        except ApiError as err:
            if is_not_found(err):
                return "missing"
            raise
        names = [(hook.name, hook.clientConfig.caBundle) for hook in config.webhooks or []]
        patch = ca_bundle_patch(names, base64.b64encode(ca).decode())
        if not patch:
            return "unchanged"
        await self._call("patch", self._client.patch(res, name, patch, patch_type=PatchType.JSON))
        return "written"

    async def whoami(self) -> str:
        """The username the API server authenticates this controller as (SelfSubjectReview)."""
        review = await self._call("create", self._client.create(SelfSubjectReview()))
        info = review.status.userInfo if review.status else None
        return str(info.username) if info and info.username else ""

    async def close(self) -> None:
        await self._client.close()
        if self._rest is not None:
            await self._rest.close()
