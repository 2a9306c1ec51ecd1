"""The runtime's webhook server over real HTTPS with kopf's own admission machinery: checks that
refuse, and webhooks that only observe — they see the raw review, always allow, take large reviews,
and wait for their certificate."""

import asyncio
import datetime as dt
import functools
import ssl
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from pathlib import Path
from typing import Any, cast

import aiohttp
import kopf
import pytest
from kopf._cogs.structs import references
from kopf._core.engines import admission as kopf_admission
from kopf._core.engines import indexing
from kopf._core.reactor import inventory

from trainerop_common import webhooks
from trainerop_common.admission import Request, Verdict
from trainerop_common.api import GROUP, KINDS, VERSION
from trainerop_common.cache import ObjectCache
from trainerop_common.loops import HOME, LoopThread, on_loop
from trainerop_common.webhook_tls import issue, make_ca, write_pair
from trainerop_common.webhooks import ReviewServer, register_admission, register_object_check, register_observer

NOW = dt.datetime.now(dt.UTC)


def review(
    resource: str, operation: str, subresource: str = "", size: int = 0, uid: str = "u-1", group: str = GROUP
) -> dict[str, Any]:
    obj = {"metadata": {"name": "x", "namespace": "team", "uid": "obj"}, "spec": {"epochs": 1, "pad": "p" * size}}
    request: dict[str, Any] = {
        "uid": uid,
        "resource": {"group": group, "version": "v1" if group != GROUP else VERSION, "resource": resource},
        "operation": operation,
        "userInfo": {"username": "alice"},
        "oldObject" if operation == "DELETE" else "object": obj,
    }
    if subresource:
        request["subResource"] = subresource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


class Served:
    """A ReviewServer on a free port with kopf's admission engine behind it."""

    def __init__(self, tmp: Path, wait_for_files: bool = False, own_loop: bool = True) -> None:
        self.ca = make_ca(NOW)
        self.tmp = tmp
        self.seen: list[Mapping[str, Any]] = []
        self.checked: list[tuple[str, str]] = []  # what the object check was asked about
        self.threads: dict[str, str] = {}  # what ran on which thread
        registry = kopf.OperatorRegistry()

        async def observer(review: Mapping[str, Any]) -> None:
            self.seen.append(review)
            self.threads["observer"] = threading.current_thread().name
            raise RuntimeError("an observer's failure never denies")

        async def refuse(request: Request) -> Verdict:
            self.threads["check"] = threading.current_thread().name
            return Verdict(problems=(f"no {request.name}",))

        async def refuse_object(plural: str, obj: Mapping[str, Any]) -> Verdict:
            self.checked.append((plural, obj["metadata"]["name"]))
            return Verdict(problems=(f"no {plural} {obj['metadata']['name']}",))

        async def close() -> None:
            self.threads["close"] = threading.current_thread().name

        resources = [("trainers", "*"), ("clustertrainingprofiles", None), ("auditlogs", None)]
        register_observer(registry, "audit", resources, observer)
        register_admission(registry, "test", "validate-trainer", refuse)
        created = [("", "v1", "pods"), ("rbac.authorization.k8s.io", "v1", "rolebindings")]
        register_object_check(registry, "test", "validate-creations", created, refuse_object)
        insights = references.Insights()
        insights.webhook_resources.update(
            references.Resource(GROUP, VERSION, k.plural, kind=k.kind, namespaced=k.scope == "Namespaced")
            for k in KINDS
        )
        insights.webhook_resources.update(references.Resource(g, v, p, namespaced=True) for g, v, p in created)
        self.memories = inventory.ResourceMemories()
        self.fn = functools.partial(
            kopf_admission.serve_admission_request,
            settings=kopf.OperatorSettings(),
            memories=self.memories,
            memobase=kopf.Memo(),  # type: ignore[arg-type]  # kopf's own default memo
            registry=registry,
            insights=insights,
            indices=indexing.OperatorIndices(indexing.OperatorIndexers()),
        )
        self.server = ReviewServer(
            addr="127.0.0.1",
            port=0,
            certfile=str(tmp / "tls.crt"),
            pkeyfile=str(tmp / "tls.key"),
            observers=frozenset({"audit"}),
            own_loop=own_loop,
            wait_for_files=wait_for_files,
            close=close,
        )

    def mount_certificate(self) -> None:
        write_pair(issue(self.ca, ["127.0.0.1"], NOW), self.tmp / "tls.crt", self.tmp / "tls.key")

    async def start(self) -> str:
        """Served as kopf serves it: the server is a context manager that closes what it yielded."""
        await self.server.__aenter__()
        config = await anext(cast(AsyncGenerator[Any, None], self.server(self.fn)))
        return str(config["url"])

    async def stop(self) -> None:
        await self.server.__aexit__(None, None, None)

    async def post(self, url: str, path: str, body: Any) -> tuple[int, Any]:
        (self.tmp / "ca.crt").write_bytes(self.ca.cert)
        context = ssl.create_default_context(cafile=str(self.tmp / "ca.crt"))
        async with aiohttp.ClientSession() as http, http.post(url.rstrip("/") + path, json=body, ssl=context) as r:
            return r.status, await r.json(content_type=None) if r.status == 200 else None


@pytest.fixture(params=[True, False], ids=["own loop", "observers only: the controller's loop"])
async def served(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[tuple[Served, str]]:
    s = Served(tmp_path, own_loop=request.param)
    s.mount_certificate()
    url = await s.start()
    yield s, url
    await s.stop()


@pytest.mark.parametrize(
    ("resource", "operation", "subresource"),
    [
        ("trainers", "CREATE", ""),
        ("trainers", "UPDATE", "scale"),  # "*" covers the subresources
        ("trainers", "UPDATE", "status"),
        ("clustertrainingprofiles", "DELETE", ""),  # cluster-scoped; the old object is the body
        ("auditlogs", "DELETE", ""),
    ],
)
async def test_an_observer_sees_the_raw_review_and_the_request_is_allowed(
    served: tuple[Served, str], resource: str, operation: str, subresource: str
) -> None:
    s, url = served
    sent = review(resource, operation, subresource, uid=f"{resource}-{operation}")
    status, answer = await s.post(url, "/audit", sent)
    assert status == 200
    assert answer["response"] == {"uid": sent["request"]["uid"], "allowed": True}
    assert [r["request"]["uid"] for r in s.seen] == [sent["request"]["uid"]]  # the request's own uid


async def test_a_review_larger_than_kopfs_limit_is_observed(served: tuple[Served, str]) -> None:
    s, url = served
    status, answer = await s.post(url, "/audit", review("trainers", "UPDATE", size=3 * 1024 * 1024))
    assert (status, answer["response"]["allowed"]) == (200, True)
    assert len(s.seen) == 1


async def test_a_check_that_refuses_is_not_made_to_allow(served: tuple[Served, str]) -> None:
    s, url = served  # (a server without a loop of its own serves no checks in a controller: runtime.admit)
    _, answer = await s.post(url, "/validate-trainer", review("trainers", "CREATE"))
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"] == "no x"
    assert s.seen == []


@pytest.mark.parametrize(("group", "resource"), [("", "pods"), ("rbac.authorization.k8s.io", "rolebindings")])
async def test_a_check_of_another_kinds_creation_sees_its_plural_and_object(
    served: tuple[Served, str], group: str, resource: str
) -> None:
    s, url = served
    _, answer = await s.post(url, "/validate-creations", review(resource, "CREATE", group=group))
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"] == f"no {resource} x"
    assert s.checked == [(resource, "x")]


@pytest.mark.parametrize(
    ("path", "resource", "operation"),
    [("/validate-trainer", "trainers", "UPDATE"), ("/audit", "trainers", "UPDATE"), ("/audit", "auditlogs", "DELETE")],
)
async def test_kopf_keeps_no_memory_of_a_reviewed_object(
    served: tuple[Served, str], path: str, resource: str, operation: str
) -> None:
    s, url = served
    webhooks.reviews_remember_nothing()
    status, _ = await s.post(url, path, review(resource, operation))
    assert status == 200
    assert list(s.memories.iter_all_memories()) == []  # nothing a later event would have to forget


async def test_an_observing_server_waits_for_its_certificate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhooks, "CERTIFICATE_WAIT_SECONDS", 0.01)
    s = Served(tmp_path, wait_for_files=True)
    starting = asyncio.ensure_future(s.start())
    await asyncio.sleep(0.1)  # several looks: nothing to serve with yet
    assert not starting.done()
    s.mount_certificate()
    url = await asyncio.wait_for(starting, 10)
    try:
        status, _ = await s.post(url, "/audit", review("trainers", "CREATE"))
    finally:
        await s.stop()
    assert status == 200


async def test_a_check_is_answered_while_the_controllers_own_loop_is_busy(tmp_path: Path) -> None:
    s = Served(tmp_path)
    s.mount_certificate()
    url = await s.start()
    answered = threading.Event()

    def post() -> Any:
        _, answer = asyncio.run(s.post(url, "/validate-trainer", review("trainers", "CREATE")))
        answered.set()
        return answer

    asking = threading.Thread(target=lambda: result.append(post()))
    result: list[Any] = []
    asking.start()
    # This loop (the controller's) runs nothing until the answer came: a backlog of reconciles.
    came_while_busy = answered.wait(60)
    asking.join()
    await s.stop()
    assert came_while_busy
    assert result[0]["response"]["allowed"] is False
    assert s.threads["check"] == "admission"


async def test_an_observer_runs_on_the_controllers_own_loop(served: tuple[Served, str]) -> None:
    s, url = served
    await s.post(url, "/audit", review("trainers", "CREATE"))
    assert s.threads["observer"] == threading.current_thread().name != "admission"


async def test_the_admission_thread_ends_with_the_server_and_closes_the_checks_client(tmp_path: Path) -> None:
    s = Served(tmp_path)
    s.mount_certificate()
    await s.start()
    await s.stop()
    assert s.threads["close"] == "admission"
    assert "admission" not in {t.name for t in threading.enumerate()}


async def test_a_server_of_observers_only_runs_no_thread_and_closes_the_client_on_the_controllers_loop(
    tmp_path: Path,
) -> None:
    s = Served(tmp_path, own_loop=False)
    s.mount_certificate()
    url = await s.start()
    try:
        status, _ = await s.post(url, "/audit", review("trainers", "CREATE"))
        threads = {t.name for t in threading.enumerate()}
    finally:
        await s.stop()
    assert status == 200
    assert "admission" not in threads
    assert s.threads == {"observer": threading.current_thread().name, "close": threading.current_thread().name}


async def test_a_cache_first_read_by_a_check_is_listed_on_the_controllers_loop() -> None:
    listed_on: list[str] = []

    async def lister(keep: Any) -> list[dict[str, Any]]:
        listed_on.append(threading.current_thread().name)
        return [keep({"metadata": {"name": "n1", "namespace": ""}})]

    nodes = ObjectCache(lister, "", "v1", "nodes")
    home = asyncio.get_running_loop()

    async def check() -> list[dict[str, Any]]:
        HOME.set(home)  # as ReviewServer sets it for each review
        return await nodes.values()

    admission = LoopThread("admission")
    try:
        held = await on_loop(admission.loop, check())
    finally:
        await admission.stop()
    assert [o["metadata"]["name"] for o in held] == ["n1"]
    assert listed_on == [threading.current_thread().name]
