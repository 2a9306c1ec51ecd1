"""A model from S3 fetched once per manifest into the shared cache, every file checked (I/O).

An S3 source (``s3://bucket/prefix[@sha256:<hex>]``) is the files its manifest
``<prefix>/SHA256SUMS`` lists (``sha256sum``'s output), each checked against its sha256 as it is
downloaded: S3's own checksums are optional, and for multipart uploads not of the whole object.
A pinned source also checks the manifest itself, so what runs is what the Trainer names, whoever
can write the bucket. The credentials are the pod's environment (``AWS_*``), never written.
"""

import contextlib
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from trainerop_sdk.models import SUMS, S3Source, patterns_key, revision_dir
from trainerop_sdk.s3 import Credentials, S3Client, S3Error

from . import verify
from .cache import (
    MANIFEST,
    Fetched,
    FetchError,
    Say,
    cache_not_writable,
    exclusive,
    found,
    into_place,
    partial_directory,
    placed,
    shared_directories,
)

PARALLEL_DOWNLOADS = 4


def fetch_s3(source: S3Source, cache: Path, patterns: Sequence[str], creds: Credentials, say: Say) -> Fetched:
    """The model at ``source`` in ``cache``: found there, or downloaded and checked."""
    where = cache / revision_dir(source, patterns)
    with s3_errors(source, creds.endpoint):
        shared_directories(cache, where.parent, say)
        with exclusive(where.parent / ".lock", say):
            return fetched_under_lock(source, where, patterns, S3Client(creds, source.bucket), say)


def fetched_under_lock(source: S3Source, where: Path, patterns: Sequence[str], client: S3Client, say: Say) -> Fetched:
    files = found(where, say) if source.pinned else None  # its directory is the pin's: no request at all
    if files is not None:
        say(f"{source} is in the cache: nothing to download")
        return Fetched(where, str(source.manifest_sha256), files, downloaded=False)  # no link to move
    sums = client.get(source.manifest_key)
    if sums is None:
        raise FetchError(
            "ModelNotFound",
            f"bucket {source.bucket} has no {source.manifest_key}: put the model's files under {source.prefix}/ "
            f"with their {SUMS} (sha256sum * > {SUMS})",
        )
    digest = hashlib.sha256(sums).hexdigest()
    if source.pinned and digest != source.manifest_sha256:
        raise FetchError(
            "HashMismatch",
            f"refused: {source.manifest_key} hashes to sha256:{digest}, not the sha256:{source.manifest_sha256} the "
            "source names (it changed since it was pinned, or was tampered with); nothing was downloaded",
        )
    final = where.parent / (f"@{digest}" + patterns_key(patterns))
    files = found(final, say)
    if files is not None:
        say(f"{source} (manifest sha256:{digest}) is in the cache: nothing to download")
        path, note = placed(where, final, say)
        return Fetched(path, digest, files, downloaded=False, note=note)
    expected = wanted_files(source, sums, patterns)
    say(f"downloading {len(expected)} files of {source} (manifest sha256:{digest})")
    listed = {path: {"sha256": sha} for path, sha in sorted(expected.items())}
    manifest = {"source": str(source), "manifest": digest, "files": listed, "patterns": list(patterns)}
    with partial_directory(final) as partial:
        download(client, source, expected, partial, say)
        path, note = into_place(partial, final, where, json.dumps(manifest, indent=1), say)
    say(f"verified {len(expected)} files against {SUMS}: {path}")
    return Fetched(path, digest, len(expected), downloaded=True, note=note)


def wanted_files(source: S3Source, sums: bytes, patterns: Sequence[str]) -> dict[str, str]:
    """The manifest's files the patterns take (path -> sha256)."""
    try:
        listed = verify.parse_sums(sums.decode("utf-8"), SUMS, MANIFEST)
    except (verify.ManifestError, UnicodeDecodeError) as err:
        raise FetchError("InvalidManifest", f"{source.manifest_key} cannot be used: {err}") from None
    wanted = {path: sha for path, sha in listed.items() if verify.wanted(path, patterns)}
    if not wanted:
        what = f"matches {', '.join(patterns)}" if patterns else "is listed"
        raise FetchError("NoFilesMatched", f"no file of {source} {what}: check the model's files patterns")
    return wanted


def download(client: S3Client, source: S3Source, expected: Mapping[str, str], into: Path, say: Say) -> None:
    """Each listed file into ``into``, a few at once, its sha256 checked as it is read."""

    def one(path: str) -> None:
        target = into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        got = client.download(f"{source.prefix}/{path}", str(target))
        if got is None:
            raise FetchError("ModelNotFound", f"{SUMS} lists {path}, which is not in {source}: upload it")
        if got.sha256 != expected[path]:
            raise FetchError(
                "HashMismatch",
                f"refused: {path}: sha256 {got.sha256} where {SUMS} lists {expected[path]} (the file is corrupted "
                "or was tampered with; nothing was kept)",
            )
        say(f"downloaded {path} ({got.size / 2**20:.1f} MiB)")

    into.mkdir(parents=True, exist_ok=True)  # made by partial_directory
    pool = ThreadPoolExecutor(PARALLEL_DOWNLOADS)
    try:
        list(pool.map(one, sorted(expected)))
    finally:  # after a refusal, the files not started are not fetched
        pool.shutdown(cancel_futures=True)


@contextlib.contextmanager
def s3_errors(source: S3Source, endpoint: str) -> Iterator[None]:
    """The client's errors as FetchErrors that say what to check."""
    try:
        yield
    except FetchError:
        raise
    except S3Error as err:
        if err.status in (401, 403):
            raise FetchError(
                "AccessDenied",
                f"{endpoint} refused to let these credentials read {source}: check the model's credentialsSecret",
            ) from None
        raise FetchError("StorageUnavailable", f"cannot fetch {source} from {endpoint}: {err}") from None
    except PermissionError as err:
        raise cache_not_writable(err) from None
    except Exception as err:  # the network's (a body cut short too), the disk's, a bad endpoint: said as they are
        raise FetchError(
            "StorageUnavailable", f"cannot fetch {source} from {endpoint}: {type(err).__name__}: {err}"
        ) from None
