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
from typing import Any

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
APPLY = "application/apply-patch+yaml"  # server-side apply (JSON is YAML)
MERGE = "application/merge-patch+json"


class ApiError(Exception):
    """The API server refused the request or could not be reached."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


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
    ) -> dict[str, Any]:
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
            raise ApiError(f"{method} {path} refused: {err.code} {detail}", err.code) from err
        except OSError as err:
            raise ApiError(f"{method} {path} failed: {err}") from err
        out: dict[str, Any] = json.loads(data) if data else {}
        return out
