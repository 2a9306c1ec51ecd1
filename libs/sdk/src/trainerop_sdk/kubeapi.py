"""The few Kubernetes API calls training code makes, with the pod's own ServiceAccount token
(standard library only)."""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from time import sleep
from typing import Any

from .retry import backoff_seconds

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
APPLY = "application/apply-patch+yaml"  # server-side apply (JSON is YAML)
MERGE = "application/merge-patch+json"


# A call the API server could not take (overloaded, restarting, a timeout under load) is tried
# again: a checkpoint's load or report failing on it would otherwise end a training process with an
# error that reads as a bug in the training code (exit code 1: permanent under restartPolicy ExitCode).
ATTEMPTS = 4
MAX_RETRY_AFTER = 10.0
RETRIED_SERVER_ERRORS = frozenset({500, 502, 503, 504})


class ApiError(Exception):
    """The API server refused the request (``code``) or could not be reached (code 0)."""

    def __init__(self, message: str, code: int = 0, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.retry_after = retry_after  # seconds the server asked to wait before the next attempt


@dataclass(frozen=True)
class ApiClient:
    server: str  # https://host:port
    token: str
    namespace: str
    ca_file: str | None = None

    @classmethod
    def in_cluster(cls) -> ApiClient:
        """The mounted ServiceAccount token, its namespace and the cluster's CA."""
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise ApiError("not running in a pod: KUBERNETES_SERVICE_HOST is not set")
        return cls(
            server=f"https://{host}:{port}",
            token=(SA_DIR / "token").read_text().strip(),
            namespace=(SA_DIR / "namespace").read_text().strip(),
            ca_file=str(SA_DIR / "ca.crt"),
        )

    def request(
        self,
        method: str,
        path: str,
        body: object | None = None,
        content_type: str = "application/json",
        timeout: float = 10.0,
        attempts: int = ATTEMPTS,
    ) -> dict[str, Any]:
        """One API call; a transient failure (:func:`transient`) is tried again, up to ``attempts``
        in all, after :func:`.retry.backoff_seconds` (or the server's Retry-After, at most
        MAX_RETRY_AFTER): four attempts wait 3.5 s in all, plus their timeouts."""
        for attempt in range(attempts):
            try:
                return self._send(method, path, body, content_type, timeout)
            except ApiError as err:
                if attempt == attempts - 1 or not transient(method, err):
                    raise
                sleep(err.retry_after if err.retry_after is not None else backoff_seconds(attempt))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _send(self, method: str, path: str, body: object | None, content_type: str, timeout: float) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.server}{path}",
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type},
        )
        context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                data = response.read()
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")
            with contextlib.suppress(ValueError):
                detail = json.loads(detail).get("message", detail)
            raise ApiError(f"{method} {path} refused: {err.code} {detail}", err.code, retry_after(err)) from err
        except OSError as err:
            raise ApiError(f"{method} {path} failed: {err}") from err
        out: dict[str, Any] = json.loads(data) if data else {}
        return out


def transient(method: str, err: ApiError) -> bool:
    """Worth another attempt: the server could not be reached or answered in time (code 0), was
    too busy (429: not processed, so a create too), or failed (5xx: a create may have gone through,
    so only a read or an idempotent update is sent again)."""
    if err.code == 429:
        return True
    return method != "POST" and (err.code == 0 or err.code in RETRIED_SERVER_ERRORS)


def retry_after(err: urllib.error.HTTPError) -> float | None:
    """The server's Retry-After in seconds (at most MAX_RETRY_AFTER), if it said one."""
    value = err.headers.get("Retry-After") if err.headers is not None else None
    try:
        return min(max(float(value), 0.0), MAX_RETRY_AFTER) if value is not None else None
    except ValueError:
        return None
