"""A model of the Hugging Face Hub fetched once per revision into the shared cache, every file
checked (I/O; the cache's layout and mechanics: :mod:`cache`).

Whoever holds the model's lock either finds the commit's directory with its manifest (nothing is
downloaded) or downloads into ``.partial-…``, checks every file against the Hub's listing
(:mod:`verify`), and only then renames it into place. A token is passed to the client and never
written or logged.
"""

import contextlib
import json
import logging
import shutil
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.hf_api import RepoFile

from trainerop_sdk.models import HubSource, patterns_key, revision_dir

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

__all__ = ["MANIFEST", "FetchError", "Fetched", "fetch", "revision_path"]

log = logging.getLogger("trainerop.models")


def revision_path(cache: Path, source: HubSource, patterns: Sequence[str] = ()) -> Path:
    """Where a pod finds the model's files (``MODEL_PATH``)."""
    return cache / revision_dir(source, patterns)


def fetch(
    source: HubSource, cache: Path, patterns: Sequence[str], endpoint: str, token: str | None, say: Say
) -> Fetched:
    """The model at ``source`` in ``cache``: found there, or downloaded and checked."""
    where = revision_path(cache, source, patterns)
    with hub_errors(source, endpoint):
        shared_directories(cache, where.parent, say)
        with exclusive(where.parent / ".lock", say):
            return fetched_under_lock(source, where, patterns, endpoint, token, say)


def fetched_under_lock(
    source: HubSource, where: Path, patterns: Sequence[str], endpoint: str, token: str | None, say: Say
) -> Fetched:
    """What :func:`fetch` does while it holds the model's lock."""
    api = HfApi(endpoint=endpoint, token=token or False)
    commit = source.revision if source.pinned else resolve(api, source)
    final = where.parent / (commit + patterns_key(patterns))
    files = found(final, say)
    if files is not None:
        say(f"{source} (commit {commit}) is in the cache: nothing to download")
        path, note = placed(where, final, say)
        return Fetched(path, commit, files, downloaded=False, note=note)
    expected = listing(api, source, commit, patterns)
    size = sum(e.size for e in expected.values())
    say(f"downloading {len(expected)} files ({size / 2**20:.1f} MiB) of {source} (commit {commit})")
    with partial_directory(final) as partial:
        download(source, commit, expected, partial, endpoint, token, say)
        checked(partial, expected)
        shutil.rmtree(partial / ".cache", ignore_errors=True)  # the client's own bookkeeping
        path, note = into_place(partial, final, where, manifest(source, commit, patterns, expected), say)
    say(f"verified {len(expected)} files against the Hub's listing: {path}")
    return Fetched(path, commit, len(expected), downloaded=True, note=note)


def resolve(api: HfApi, source: HubSource) -> str:
    sha = api.model_info(source.repo_id, revision=source.revision).sha
    if not sha:
        raise FetchError("HubUnavailable", f"the Hub did not say which commit {source} is")
    return sha


def listing(api: HfApi, source: HubSource, commit: str, patterns: Sequence[str]) -> dict[str, verify.Expected]:
    """What each wanted file must hash to, from the Hub's tree at ``commit``."""
    files = {
        f.path: (f.path, f.size, f.blob_id, f.lfs.sha256 if f.lfs else None)
        for f in api.list_repo_tree(source.repo_id, revision=commit, recursive=True)
        if isinstance(f, RepoFile)
    }
    wanted = [path for path in files if verify.wanted(path, patterns)]
    if not wanted:
        what = f"matches {', '.join(patterns)}" if patterns else "is in it"
        raise FetchError("NoFilesMatched", f"no file of {source} {what}: check the model's files patterns")
    return verify.expected_of(files[p] for p in wanted)


PARALLEL_DOWNLOADS = 4


def download(
    source: HubSource,
    commit: str,
    expected: dict[str, verify.Expected],
    into: Path,
    endpoint: str,
    token: str | None,
    say: Say,
) -> None:
    """Each listed file into ``into``, a few at once, each said when done. A file the client
    refuses as being of another size than the Hub says is refused by name, as a hash mismatch."""

    def one(path: str) -> None:
        try:
            hf_hub_download(
                source.repo_id,
                path,
                revision=commit,
                local_dir=into,
                cache_dir=into / ".cache" / "hub",
                endpoint=endpoint,
                token=token or False,
            )
        except OSError as err:
            if CLIENT_SIZE_CHECK not in str(err):
                raise
            raise FetchError(
                "HashMismatch",
                f"refused: {path}: not the {expected[path].size} bytes the source lists ({str(err).splitlines()[0]}); "
                "nothing was kept",
            ) from None
        say(f"downloaded {path} ({expected[path].size / 2**20:.1f} MiB)")

    with ThreadPoolExecutor(PARALLEL_DOWNLOADS) as pool:
        list(pool.map(one, sorted(expected)))


CLIENT_SIZE_CHECK = "Consistency check failed"  # the client's OSError for a file of another size


def checked(partial: Path, expected: dict[str, verify.Expected]) -> None:
    bad = verify.problems(partial, expected)
    if bad:  # (partial_directory removes what was downloaded)
        raise FetchError(
            "HashMismatch",
            f"refused: {'; '.join(bad)} (the file is corrupted or was tampered with on its way; nothing was kept)",
        )


def manifest(source: HubSource, commit: str, patterns: Sequence[str], expected: dict[str, verify.Expected]) -> str:
    files = {path: e.to_manifest() for path, e in sorted(expected.items())}
    return json.dumps({"source": str(source), "commit": commit, "files": files, "patterns": list(patterns)}, indent=1)


@contextlib.contextmanager
def hub_errors(source: HubSource, endpoint: str) -> Iterator[None]:
    """The client's errors as FetchErrors that say what to check."""
    try:
        yield
    except RevisionNotFoundError:
        raise FetchError(
            "RevisionNotFound", f"{source.repo_id} has no revision {source.revision!r}: name a commit, branch or tag"
        ) from None
    except (RepositoryNotFoundError, GatedRepoError):
        raise FetchError(
            "ModelNotFound",
            f"the Hub at {endpoint} has no repository {source.repo_id} that this token may read: check the name, and "
            "for a private or gated model the Secret named by the model's tokenSecret",
        ) from None
    except FetchError:
        raise
    except PermissionError as err:
        raise cache_not_writable(err) from None
    except Exception as err:  # the client's HTTP errors, its own, the network's, the disk's: said as they are
        raise FetchError(
            "HubUnavailable", f"cannot fetch {source} from {endpoint}: {type(err).__name__}: {err}"
        ) from None
