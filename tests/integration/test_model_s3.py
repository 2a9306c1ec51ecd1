"""A model from S3 (docs/models.md): the initializer (trainerop-model-init, as each pod runs it)
against the local cluster's real S3 server (SeaweedFS): the files SHA256SUMS lists fetched once
into the cache and each checked as it is read; a pinned manifest that changed, a tampered file and
wrong credentials refused with what to do; a second run downloads nothing."""

import hashlib
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import cluster as cluster_tool
from tests.harness import Cluster
from trainerop_models import cli
from trainerop_sdk.s3 import Credentials, S3Client

FILES = {"config.json": b'{"hidden": 8}\n', "weights/model.bin": bytes(range(256)) * 512}


def sums(files: dict[str, bytes]) -> bytes:
    return "".join(f"{hashlib.sha256(data).hexdigest()}  {path}\n" for path, data in sorted(files.items())).encode()


@pytest.fixture
def bucket(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Client]:
    """A bucket of its own with the model under models/tiny/, and the initializer's environment
    as a pod's would be (the credentials Secret's keys)."""
    credentials = cluster_tool.s3_credentials()
    for key, value in credentials.items():
        monkeypatch.setenv(key, value)
    client = S3Client(Credentials.from_env(credentials), f"models-{uuid.uuid4().hex[:10]}")
    client.create_bucket()
    for path, data in FILES.items():
        client.put(f"models/tiny/{path}", data)
    client.put("models/tiny/SHA256SUMS", sums(FILES))
    client.put("models/tiny/not-listed.bin", b"never fetched")
    yield client
    client.delete_prefix("")


def initialize(source: str, cache: Path, *files: str) -> tuple[int, str]:
    """The initializer's exit code and termination message."""
    log = cache.parent / f"termination-{uuid.uuid4().hex[:6]}"
    argv = ["--source", source, "--cache", str(cache), "--termination-log", str(log)]
    for pattern in files:
        argv += ["--files", pattern]
    code = cli.main(argv)
    return code, log.read_text()


def pinned(client: S3Client) -> str:
    return f"s3://{client.bucket}/models/tiny@sha256:{hashlib.sha256(sums(FILES)).hexdigest()}"


def test_the_listed_files_are_fetched_once_and_checked(bucket: S3Client, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    code, said = initialize(pinned(bucket), cache)
    assert (code, said.split(": ")[0]) == (0, "Verified")
    assert said.endswith("2 files downloaded and checked")
    digest = hashlib.sha256(sums(FILES)).hexdigest()
    model = cache / "s3" / bucket.bucket / "models" / "tiny" / f"@{digest}"  # MODEL_PATH's directory
    assert {p: (model / p).read_bytes() for p in FILES} == FILES
    assert not (model / "not-listed.bin").exists()  # only what the manifest vouches for
    assert initialize(pinned(bucket), cache)[1].endswith("2 files found checked in the cache")
    code, said = initialize(f"s3://{bucket.bucket}/models/tiny", cache, "*.json")  # not pinned: as it is now
    assert code == 0
    assert "1 files downloaded and checked" in said
    (latest,) = (cache / "s3" / bucket.bucket / "models" / "tiny").glob("@latest-*")  # MODEL_PATH: a link
    assert latest.is_symlink()
    assert sorted(p.name for p in latest.iterdir()) == ["config.json", "trainer-operator-model.json"]


def test_a_manifest_changed_since_it_was_pinned_is_refused(bucket: S3Client, tmp_path: Path) -> None:
    source = pinned(bucket)
    bucket.put("models/tiny/SHA256SUMS", sums({**FILES, "config.json": b"{}"}))
    code, said = initialize(source, tmp_path / "cache")
    assert code == 1
    assert said.startswith("HashMismatch: refused: models/tiny/SHA256SUMS hashes to sha256:")
    assert "it changed since it was pinned, or was tampered with" in said


def test_a_tampered_file_is_refused_by_name_and_nothing_is_kept(bucket: S3Client, tmp_path: Path) -> None:
    bucket.put("models/tiny/weights/model.bin", b"tampered")
    cache = tmp_path / "cache"
    code, said = initialize(pinned(bucket), cache)
    assert code == 1
    assert said.startswith(
        f"HashMismatch: refused: weights/model.bin: sha256 {hashlib.sha256(b'tampered').hexdigest()}"
    )
    model_dir = cache / "s3" / bucket.bucket / "models" / "tiny"
    assert [p.name for p in model_dir.iterdir() if p.name != ".lock"] == []


def test_a_checked_revision_is_read_only_and_one_changed_in_the_cache_is_fetched_again(
    bucket: S3Client, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    assert initialize(pinned(bucket), cache)[0] == 0
    digest = hashlib.sha256(sums(FILES)).hexdigest()
    model = cache / "s3" / bucket.bucket / "models" / "tiny" / f"@{digest}"
    assert {stat.S_IMODE(p.stat().st_mode) for p in [model, *model.rglob("*")]} == {0o555, 0o444}
    assert stat.S_IMODE(model.parent.stat().st_mode) == 0o1775  # sticky: another user's entries stay
    (model / "weights" / "model.bin").chmod(0o644)  # rewritten in the cache, as an earlier release let the group
    (model / "weights" / "model.bin").write_bytes(b"tampered")
    code, said = initialize(pinned(bucket), cache)
    assert (code, said.endswith("2 files downloaded and checked")) == (0, True)  # not trusted: fetched again
    assert (model / "weights" / "model.bin").read_bytes() == FILES["weights/model.bin"]


@pytest.mark.parametrize(
    ("change", "reason", "words"),
    [
        ("no manifest", "ModelNotFound", "has no models/tiny/SHA256SUMS"),
        ("wrong secret key", "AccessDenied", "check the model's credentialsSecret"),
        ("a listed file missing", "ModelNotFound", "SHA256SUMS lists weights/model.bin, which is not in"),
        ("a path leaving the prefix", "InvalidManifest", "'../escape' is not a path under the prefix"),
    ],
)
def test_what_cannot_be_fetched_says_what_to_fix(
    bucket: S3Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str, reason: str, words: str
) -> None:
    if change == "no manifest":
        bucket.delete("models/tiny/SHA256SUMS")
    elif change == "wrong secret key":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-key")
    elif change == "a listed file missing":
        bucket.delete("models/tiny/weights/model.bin")
    else:
        bucket.put("models/tiny/SHA256SUMS", sums(FILES) + f"{'0' * 64}  ../escape\n".encode())
    code, said = initialize(f"s3://{bucket.bucket}/models/tiny", tmp_path / "cache")
    assert code == 1
    assert said.startswith(f"{reason}: ")
    assert words in said
