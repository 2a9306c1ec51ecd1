"""A small S3 client (Signature Version 4, path-style requests), standard library only, so that
any training image can write and read checkpoints and the operator can verify them with the
same code. It speaks the real S3 protocol (AWS, SeaweedFS, MinIO, Ceph RGW...).

Credentials and endpoint come from the usual variables: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3), AWS_REGION.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from .checksums import SHA256_HEADER, Digest, StoredChecksum, checksum_header, parse_stored_checksum
from .credentials import ENDPOINT_KEYS, REQUIRED_KEYS
from .retry import backoff_seconds

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
CHUNK = 1 << 20
SINGLE_PUT_LIMIT = 5 * 1024**3  # S3's largest single PUT
CHECKSUM_MODE = "x-amz-checksum-mode"  # ENABLED: a HEAD or GET returns the checksum stored
CHECKSUM_PREFIX = "x-amz-checksum-"  # headers a retried request keeps (signed again)


class S3Error(Exception):
    """An S3 error: its HTTP status and S3 error code only (an error body can echo request
    details such as the access key id, so it is never carried along)."""

    def __init__(self, status: int, body: str = "") -> None:
        match = re.search(r"<Code>([^<]{1,64})</Code>", body)
        super().__init__(f"S3 answered {status} {match.group(1) if match else ''}".rstrip())
        self.status = status


def _quote(text: str, safe: str = "") -> str:
    return urllib.parse.quote(text, safe="-_.~" + safe)


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    endpoint: str
    region: str = "us-east-1"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Credentials:
        env = os.environ if env is None else env
        endpoint = next((env[k] for k in ENDPOINT_KEYS if env.get(k)), "")
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
        if not endpoint:
            endpoint = f"https://s3.{region}.amazonaws.com"
        missing = [k for k in REQUIRED_KEYS if not env.get(k)]
        if missing:
            raise ValueError(f"S3 credentials missing: set {', '.join(missing)} (the Trainer's credentialsSecret)")
        return cls(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"], endpoint.rstrip("/"), region)


def signature_headers(
    creds: Credentials,
    method: str,
    url: str,
    payload_sha256: str,
    now: datetime,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The headers that sign one request with AWS Signature Version 4 (service ``s3``)."""
    parts = urllib.parse.urlsplit(url)
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    headers = {"host": parts.netloc, "x-amz-content-sha256": payload_sha256, "x-amz-date": amz_date}
    headers |= {k.lower(): v for k, v in (extra or {}).items()}
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    canonical_query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(query))
    signed = ";".join(sorted(headers))
    canonical_headers = "".join(f"{k}:{' '.join(headers[k].split())}\n" for k in sorted(headers))
    canonical = "\n".join(
        # The URL's path is already URI-encoded once, as SigV4 wants it for S3 (not twice).
        [method, parts.path or "/", canonical_query, canonical_headers, signed, payload_sha256]
    )
    scope = f"{day}/{creds.region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{creds.secret_key}".encode(), day), creds.region), "s3"), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"
    )
    del headers["host"]  # urllib sets it from the URL
    return headers


class S3Client:
    """Objects of one bucket, addressed path-style (``<endpoint>/<bucket>/<key>``)."""

    def __init__(self, creds: Credentials, bucket: str, timeout: float = 60.0) -> None:
        self.creds = creds
        self.bucket = bucket
        self.timeout = timeout

    def _url(self, key: str = "", query: Mapping[str, str] | None = None) -> str:
        path = f"/{_quote(self.bucket)}" + (f"/{_quote(key, '/')}" if key else "")
        qs = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted((query or {}).items()))
        return f"{self.creds.endpoint}{path}" + (f"?{qs}" if qs else "")

    def _open(
        self,
        method: str,
        url: str,
        body: bytes = b"",
        payload_sha256: str | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> urllib.request.Request:
        digest = payload_sha256 or (hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256)
        headers = signature_headers(self.creds, method, url, digest, datetime.now(UTC), extra)
        return urllib.request.Request(
            url, data=body if method in ("PUT", "POST") else None, method=method, headers=headers
        )

    def _send(self, request: urllib.request.Request) -> bytes:
        """Send, retrying twice on a server error or a dropped connection (S3 asks clients to)."""
        for attempt in range(3):
            try:
                with urllib.request.urlopen(self._resign(request), timeout=self.timeout) as response:
                    data: bytes = response.read()
                    return data
            except urllib.error.HTTPError as err:
                if err.code < 500 or attempt == 2:
                    raise S3Error(err.code, err.read().decode(errors="replace")) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if attempt == 2:
                    raise
            time.sleep(backoff_seconds(attempt))
        raise AssertionError("unreachable")

    def _resign(self, request: urllib.request.Request) -> urllib.request.Request:
        """A fresh signature (x-amz-date) for every attempt."""
        body = request.data if isinstance(request.data, bytes) else b""
        digest = request.get_header("X-amz-content-sha256") or EMPTY_SHA256
        extra = {k: v for k, v in request.header_items() if k.lower().startswith(CHECKSUM_PREFIX)}
        return self._open(request.get_method(), request.full_url, body, digest, extra)

    def create_bucket(self) -> None:
        try:
            self._send(self._open("PUT", self._url()))
        except S3Error as err:
            if err.status != 409:  # already exists (and ours)
                raise

    def put(self, key: str, data: bytes) -> str:
        """Write an object; returns its sha256 (which S3 checks the data against and stores)."""
        digest = hashlib.sha256(data).hexdigest()
        self._send(self._open("PUT", self._url(key), data, digest, checksum_header(digest)))
        return digest

    def put_file(self, key: str, path: str, sha256: str, size: int) -> None:
        """Write an object from a file, streamed (never held in memory), in one PUT: S3 takes at
        most 5 GiB so; larger files need the multipart upload of trainerop-sdk[s3] (boto3)."""
        if size > SINGLE_PUT_LIMIT:
            raise S3Error(413, "<Code>EntityTooLarge</Code>")
        for attempt in range(3):
            now = datetime.now(UTC)
            headers = signature_headers(self.creds, "PUT", self._url(key), sha256, now, checksum_header(sha256))
            try:
                with open(path, "rb") as body:
                    request = urllib.request.Request(
                        self._url(key), data=body, method="PUT", headers={**headers, "Content-Length": str(size)}
                    )
                    with urllib.request.urlopen(request, timeout=self.timeout) as response:
                        response.read()
                return
            except urllib.error.HTTPError as err:
                if err.code < 500 or attempt == 2:
                    raise S3Error(err.code, err.read().decode(errors="replace")) from None
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if attempt == 2:
                    raise
            time.sleep(backoff_seconds(attempt))

    def get(self, key: str) -> bytes | None:
        try:
            return self._send(self._open("GET", self._url(key)))
        except S3Error as err:
            if err.status == 404:
                return None
            raise

    def stored_checksum(self, key: str) -> StoredChecksum | None:
        """The object's size and stored checksum, from a HEAD (None: it does not exist)."""
        try:
            with urllib.request.urlopen(
                self._open("HEAD", self._url(key), extra={CHECKSUM_MODE: "ENABLED"}), timeout=self.timeout
            ) as response:
                return parse_stored_checksum(
                    response.headers.get(SHA256_HEADER), int(response.headers["Content-Length"])
                )
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise S3Error(err.code, err.read().decode(errors="replace")) from None

    def sha256(self, key: str) -> Digest | None:
        """The sha256 and size of an object, read in chunks (None: it does not exist)."""
        return self._read(key, lambda _: None)

    def download(self, key: str, path: str) -> Digest | None:
        """The object written to ``path`` as it is read, and its sha256 and size (None: it does
        not exist, and nothing is written)."""
        with open(path, "wb") as out:
            found = self._read(key, out.write)
        if found is None:
            os.unlink(path)
        return found

    def _read(self, key: str, sink: Callable[[bytes], object]) -> Digest | None:
        request = self._open("GET", self._url(key))
        digest, size = hashlib.sha256(), 0
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                while chunk := response.read(CHUNK):
                    digest.update(chunk)
                    sink(chunk)
                    size += len(chunk)
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise S3Error(err.code, err.read().decode(errors="replace")) from None
        return Digest(digest.hexdigest(), size)

    def keys(self, prefix: str) -> Iterator[str]:
        """Every key under ``prefix`` (ListObjectsV2, all pages)."""
        token = ""
        while True:
            query = {"list-type": "2", "prefix": prefix}
            if token:
                query["continuation-token"] = token
            root = ET.fromstring(self._send(self._open("GET", self._url(query=query))))
            ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
            for item in root.iter(f"{ns}Contents"):
                key = item.findtext(f"{ns}Key")
                if key:
                    yield key
            token = root.findtext(f"{ns}NextContinuationToken") or ""
            if root.findtext(f"{ns}IsTruncated") != "true" or not token:
                return

    def delete(self, key: str) -> None:
        try:
            self._send(self._open("DELETE", self._url(key)))
        except S3Error as err:
            if err.status != 404:
                raise

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``; returns how many."""
        keys = list(self.keys(prefix))
        for key in keys:
            self.delete(key)
        return len(keys)
