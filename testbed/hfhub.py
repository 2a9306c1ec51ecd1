"""A local server of the Hugging Face Hub's HTTP API: enough of it for the real ``huggingface_hub``
client to resolve a revision, list a model repository and download its files (the Hub is what the
test machines cannot reach, not its protocol; docs/design/trusted-artifacts.md, decision 4).

    with HubServer() as hub:
        commit = hub.add("acme/tiny", {"config.json": b"{}", "model.safetensors": weights})
        # HF_ENDPOINT=hub.url, or endpoint=hub.url

What it speaks (as the client reads it): ``GET /api/models/{repo}/revision/{rev}`` (``sha``,
``siblings``), ``GET /api/models/{repo}/tree/{rev}?recursive=true`` (``path``, ``size``, ``oid``
the git blob id, ``lfs`` with the content's sha256 for large files), ``HEAD``/``GET
/{repo}/resolve/{rev}/{file}`` with ``X-Repo-Commit``, ``ETag`` and, for LFS files, a redirect to
the blob with ``X-Linked-Etag`` and ``X-Linked-Size``; errors carry ``X-Error-Code`` as the Hub's
do. It never offers Xet storage. A repository may be private (a Bearer token required), and a file
may be tampered with (served with other bytes than those its listing hashes), to test what the
initializer refuses. It counts requests, so a test can tell that nothing was downloaded.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".msgpack", ".h5", ".gguf", ".npz")  # stored in LFS, as on the Hub


def git_blob_id(content: bytes) -> str:
    """Git's id of a blob: what the Hub lists as a file's ``oid`` (and its ETag, for non-LFS files)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content, usedforsecurity=False).hexdigest()


def lfs_pointer(content: bytes) -> bytes:
    sha = hashlib.sha256(content).hexdigest()
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {len(content)}\n".encode()


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit -> path -> content
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> commit
    token: str | None = None  # private: this Bearer token is required
    served: dict[str, bytes] = field(default_factory=dict)  # path -> other bytes served (tampering)


def is_lfs(path: str) -> bool:
    return path.endswith(LFS_SUFFIXES)


def tree_entry(path: str, content: bytes) -> dict[str, Any]:
    if not is_lfs(path):
        return {"type": "file", "path": path, "size": len(content), "oid": git_blob_id(content)}
    pointer = lfs_pointer(content)
    lfs = {"oid": hashlib.sha256(content).hexdigest(), "size": len(content), "pointerSize": len(pointer)}
    return {"type": "file", "path": path, "size": len(content), "oid": git_blob_id(pointer), "lfs": lfs}


class HubServer:
    """The server, on a port of its own, in a thread of its own: on loopback, or on an address
    pods reach (the machine's, for the real node's pods), with the LFS blobs on a second one."""

    def __init__(self, address: str = "127.0.0.1", blobs_address: str = "127.0.0.2") -> None:
        self.address, self.blobs_address = address, blobs_address
        self.repos: dict[str, Repo] = {}
        self.requests: Counter[str] = Counter()  # "METHOD kind": api, resolve, blob
        self.authorizations: list[str] = []  # the Authorization headers received
        self.url = ""
        self.blobs_url = ""
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    # -- content ---------------------------------------------------------------------------------

    def add(self, repo_id: str, files: dict[str, bytes], branch: str = "main", token: str | None = None) -> str:
        """A commit of ``files`` in ``repo_id``, ``branch`` pointing at it; returns the commit."""
        repo = self.repos.setdefault(repo_id, Repo(token=token))
        listing = "".join(f"{p}\0{git_blob_id(c)}\n" for p, c in sorted(files.items()))
        commit = hashlib.sha1(f"{repo_id}\n{len(repo.commits)}\n{listing}".encode(), usedforsecurity=False).hexdigest()
        repo.commits[commit] = dict(files)
        repo.refs[branch] = commit
        return commit

    def tamper(self, repo_id: str, path: str, content: bytes) -> None:
        """Serve ``content`` for ``path`` from now on, while the listing still hashes the original."""
        self.repos[repo_id].served[path] = content

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> HubServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *_: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/api/models/{org}/{name}/revision/{rev}", self._revision)
        app.router.add_get("/api/models/{org}/{name}/tree/{rev}", self._tree)
        app.router.add_route("*", "/{org}/{name}/resolve/{rev}/{path:.+}", self._resolve)
        app.router.add_get("/lfs-blobs/{org}/{name}/{commit}/{path:.+}", self._blob)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.url = await self._site(self.address)
        # LFS blobs come from another host, as the Hub's come from its CDN: the client follows a
        # redirect to another host only for the content, never for the metadata it reads first.
        self.blobs_url = await self._site(self.blobs_address)

    async def _site(self, address: str) -> str:
        assert self._runner is not None
        site = web.TCPSite(self._runner, address, 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://{address}:{port}"

    # -- the API ---------------------------------------------------------------------------------

    def _found(self, request: web.Request) -> tuple[str, Repo, str, dict[str, bytes]]:
        """The repository, commit and files a request names, or the Hub's error."""
        repo_id = f"{request.match_info['org']}/{request.match_info['name']}"
        self.authorizations.append(request.headers.get("Authorization", ""))
        repo = self.repos.get(repo_id)
        if repo is None or (repo.token and request.headers.get("Authorization") != f"Bearer {repo.token}"):
            raise error(401, "RepoNotFound", f"Repository Not Found for url: {request.url}.")
        rev = request.match_info["rev"]
        commit = repo.refs.get(rev, rev)
        if commit not in repo.commits:
            raise error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return repo_id, repo, commit, repo.commits[commit]

    async def _revision(self, request: web.Request) -> web.Response:
        self.requests[f"{request.method} api"] += 1
        repo_id, _, commit, files = self._found(request)
        siblings = [{"rfilename": p} for p in sorted(files)]
        return web.json_response({"id": repo_id, "modelId": repo_id, "sha": commit, "siblings": siblings})

    async def _tree(self, request: web.Request) -> web.Response:
        self.requests[f"{request.method} api"] += 1
        _, _, _, files = self._found(request)
        return web.json_response([tree_entry(p, c) for p, c in sorted(files.items())])

    async def _resolve(self, request: web.Request) -> web.StreamResponse:
        self.requests[f"{request.method} resolve"] += 1
        repo_id, repo, commit, files = self._found(request)
        path = request.match_info["path"]
        if path not in files:
            raise error(404, "EntryNotFound", f"{path} does not exist at {commit}")
        content = files[path]
        headers = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
        if is_lfs(path):
            headers |= {
                "ETag": f'"{git_blob_id(lfs_pointer(content))}"',
                "X-Linked-Etag": f'"{hashlib.sha256(content).hexdigest()}"',
                "X-Linked-Size": str(len(content)),
                "Location": f"{self.blobs_url}/lfs-blobs/{repo_id}/{commit}/{path}",
            }
            return web.Response(status=302, headers=headers)
        body = repo.served.get(path, content)
        headers |= {"ETag": f'"{git_blob_id(content)}"', "Content-Length": str(len(body))}
        if request.method == "HEAD":
            return web.Response(status=200, headers=headers)
        self.requests["content"] += 1
        return web.Response(body=body, headers=headers)

    async def _blob(self, request: web.Request) -> web.Response:
        self.requests[f"{request.method} blob"] += 1
        repo_id = f"{request.match_info['org']}/{request.match_info['name']}"
        repo, path = self.repos[repo_id], request.match_info["path"]
        body = repo.served.get(path, repo.commits[request.match_info["commit"]][path])
        headers = {"Content-Length": str(len(body)), "ETag": f'"{hashlib.sha256(body).hexdigest()}"'}
        if request.method == "HEAD":
            return web.Response(status=200, headers=headers)
        self.requests["content"] += 1
        return web.Response(body=body, headers=headers)

    def downloads(self) -> int:
        """Files' contents served (a non-LFS file's, or an LFS blob's)."""
        return self.requests["content"]


def error(status: int, code: str, message: str) -> web.HTTPException:
    headers = {"X-Error-Code": code, "X-Error-Message": message}
    exc = web.HTTPUnauthorized if status == 401 else web.HTTPNotFound
    return exc(headers=headers, text=f'{{"error": "{message}"}}', content_type="application/json")
