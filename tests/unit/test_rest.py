"""The hot requests' aiohttp path (trainerop_common.rest): URLs, refusals as lightkube's ApiError,
a rotated token read again on 401, connection failures as ConnectionError. Served by a real HTTP
server on loopback; the integration tier sends every controller's creates, status applies and
deletes this way to the real API server."""

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from lightkube import ApiError
from lightkube.resources.core_v1 import Node, Pod

from trainerop_common.kube import RESOURCES, resource_path
from trainerop_common.rest import APPLY, Rest, Token, proxy_for, refusal

GROUP = "/apis/trainer.operator.kubeflow.org/v1alpha1"


@pytest.mark.parametrize(
    ("res", "namespace", "name", "path"),
    [
        (Pod, "ns", None, "/api/v1/namespaces/ns/pods"),
        (Pod, "ns", "t-worker-0", "/api/v1/namespaces/ns/pods/t-worker-0"),
        (Node, None, "n1", "/api/v1/nodes/n1"),
        (RESOURCES["AuditLog"], "ns", None, f"{GROUP}/namespaces/ns/auditlogs"),
        (RESOURCES["Trainer"].Status, "ns", "t", f"{GROUP}/namespaces/ns/trainers/t/status"),
        (RESOURCES["ClusterTrainingProfile"], None, "p", f"{GROUP}/clustertrainingprofiles/p"),
    ],
)
def test_resource_paths(res: Any, namespace: str | None, name: str | None, path: str) -> None:
    assert resource_path(res, namespace, name) == path


@pytest.mark.parametrize(
    ("status", "body", "code", "reason", "message"),
    [
        (
            409,
            b'{"kind":"Status","code":409,"reason":"AlreadyExists","message":"pods \\"a\\" already exists"}',
            409,
            "AlreadyExists",
            'pods "a" already exists',
        ),
        (404, b'{"kind":"Status","reason":"NotFound","message":"gone"}', 404, "NotFound", "gone"),
        (503, b"upstream connect error", 503, None, "upstream connect error"),
        (500, b"", 500, None, "HTTP 500"),
    ],
)
def test_refusals_read_as_lightkube_reports_them(
    status: int, body: bytes, code: int, reason: str | None, message: str
) -> None:
    err = refusal(status, body)
    assert isinstance(err, ApiError)
    assert (err.status.code, err.status.reason, err.status.message) == (code, reason, message)


def test_a_token_from_a_file_is_read_again_only_when_it_changed(tmp_path: Path) -> None:
    file = tmp_path / "token"
    file.write_text("one\n")
    token = Token(file=str(file))
    sent = token.header()
    assert sent == {"Authorization": "Bearer one"}
    assert token.renewed(sent) is False  # the same token on file: nothing new to try
    file.write_text("two")
    assert token.renewed(sent) is True
    assert token.header() == {"Authorization": "Bearer two"}
    # another request refused with "one" meanwhile: the token was renewed already, try it
    assert token.renewed(sent) is True
    assert Token(value="fixed\n").header() == {"Authorization": "Bearer fixed"}  # as in a pod's config
    assert Token(value="fixed").renewed({"Authorization": "Bearer fixed"}) is False
    assert Token().header() == {}


@pytest.mark.parametrize(
    ("env", "proxy"),
    [
        ({}, None),
        ({"HTTPS_PROXY": "http://proxy:3128"}, "http://proxy:3128"),
        ({"https_proxy": "http://proxy:3128", "no_proxy": "10.0.0.1"}, None),
        ({"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": ".cluster.local,other"}, "http://proxy:3128"),
    ],
)
def test_the_proxy_is_the_environments_unless_no_proxy_covers_the_api_server(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], proxy: str | None
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert proxy_for("https://10.0.0.1:6443") == proxy


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """An API-server-shaped endpoint: accepts only the token "fresh", records what it was sent."""
    seen: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "type": request.content_type,
                "auth": request.headers.get("Authorization"),
                "body": await request.read(),
            }
        )
        if request.headers.get("Authorization") != "Bearer fresh":
            return web.json_response({"kind": "Status", "code": 401, "message": "Unauthorized"}, status=401)
        if request.path.endswith("/taken"):
            return web.json_response({"kind": "Status", "code": 409, "reason": "AlreadyExists"}, status=409)
        return web.json_response({"metadata": {"resourceVersion": "42"}}, status=201)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


async def test_a_request_carries_its_body_and_is_sent_again_with_a_rotated_token(
    server: tuple[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    url, seen = server
    file = tmp_path / "token"
    file.write_text("stale")
    token = Token(file=str(file))
    token.header()  # read when the controller started
    rest = Rest(url, None, token)
    file.write_text("fresh")  # then the kubelet rotated it
    try:
        answer = await rest.send(
            "PATCH",
            "/apis/g/v1/namespaces/ns/trainers/t/status",
            {"force": "false"},
            {"status": {"phase": "Running"}},
            APPLY,
        )
        assert answer == {"metadata": {"resourceVersion": "42"}}
        assert [s["auth"] for s in seen] == ["Bearer stale", "Bearer fresh"]
        assert seen[-1]["body"] == b'{"status":{"phase":"Running"}}'
        assert (seen[-1]["type"], seen[-1]["query"]) == (APPLY, {"force": "false"})
        with pytest.raises(ApiError) as refused:
            await rest.send("POST", "/api/v1/namespaces/ns/pods/taken", {}, {"kind": "Pod"})
        assert refused.value.status.code == 409
    finally:
        await rest.close()


async def test_no_server_is_a_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    rest = Rest(f"http://127.0.0.1:{port}", None, Token(value="t"))
    try:
        with pytest.raises(ConnectionError, match="POST /api/v1/namespaces/ns/pods"):
            await rest.send("POST", "/api/v1/namespaces/ns/pods", {}, {})
    finally:
        await rest.close()
