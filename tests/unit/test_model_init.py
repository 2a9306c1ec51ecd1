"""The model initializer: a source read, a model fetched once per revision by the real
huggingface_hub client from a local server of the Hub's API (testbed/hfhub.py), every file
checked against the listing, a tampered file refused by name, a token sent and never printed."""

import hashlib
import logging
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed.hfhub import HubServer, git_blob_id
from trainerop_models import cli, verify
from trainerop_models.fetch import MANIFEST, FetchError, fetch, revision_path
from trainerop_sdk.models import (
    SOURCE_PATTERN,
    VERIFIED,
    HubSource,
    S3Source,
    SourceError,
    parse,
    patterns_key,
    read_termination,
    revision_dir,
)

REPO = "acme/tiny"
WEIGHTS = bytes(range(256)) * 64  # an LFS file (16 KiB)
FILES = {"config.json": b'{"hidden": 8}\n', "model.safetensors": WEIGHTS, "README.md": b"# tiny\n"}

# source -> what it reads as, or the start of the error
PIN = "ab" * 32
SOURCES: list[tuple[str, HubSource | S3Source | str]] = [
    ("hf://acme/tiny@main", HubSource(REPO, "main")),
    ("hf://acme/tiny@" + "a" * 40, HubSource(REPO, "a" * 40)),
    ("hf://Org-1/model.v2@release/2026-12", HubSource("Org-1/model.v2", "release/2026-12")),
    ("hf://acme/tiny", "model source 'hf://acme/tiny': name the revision"),
    ("hf://acme/tiny@", "model source 'hf://acme/tiny@': name the revision"),
    ("s3://models/llama/tiny", S3Source("models", "llama/tiny", None)),
    (f"s3://models/tiny@sha256:{PIN}", S3Source("models", "tiny", PIN)),
    ("s3://models", "model source 's3://models': name the prefix"),
    ("s3://models/a/../b", "model source 's3://models/a/../b': name the prefix"),
    ("s3://models/.hidden", "model source 's3://models/.hidden': name the prefix"),
    ("s3://Models/tiny", "model source 's3://Models/tiny': 'Models' is not a bucket name"),
    ("s3://models/tiny@abc", "model source 's3://models/tiny@abc': after '@' comes the sha256 of SHA256SUMS"),
    ("gs://models/tiny", "model source 'gs://models/tiny': expected hf://<org>/<name>@<revision> or s3://"),
    ("hf://tiny@main", "model source 'hf://tiny@main': 'tiny' is not a Hub repository"),
    ("hf://acme/ti--ny@main", "model source 'hf://acme/ti--ny@main': 'acme/ti--ny' is not"),
    ("hf://acme/tiny@../x", "model source 'hf://acme/tiny@../x': '../x' is not a revision"),
]


@pytest.mark.parametrize(("uri", "expected"), SOURCES)
def test_a_source_is_a_hub_revision_or_an_s3_prefix(uri: str, expected: HubSource | S3Source | str) -> None:
    if not isinstance(expected, str):
        assert parse(uri) == expected
        assert str(parse(uri)) == uri
        assert re.fullmatch(SOURCE_PATTERN, uri)  # the schema lets it by too
    else:
        with pytest.raises(SourceError) as err:
            parse(uri)
        assert str(err.value).startswith(expected)


def test_a_commit_is_pinned_and_a_branch_is_not() -> None:
    assert parse("hf://acme/tiny@" + "0" * 40).pinned
    assert not parse("hf://acme/tiny@main").pinned
    assert parse(f"s3://models/tiny@sha256:{PIN}").pinned
    assert not parse("s3://models/tiny").pinned


@pytest.mark.parametrize(
    ("uri", "patterns", "directory"),
    [
        ("hf://acme/tiny@main", (), "hf/acme/tiny/main"),
        (f"s3://models/llama/tiny@sha256:{PIN}", (), f"s3/models/llama/tiny/@{PIN}"),
        ("s3://models/tiny", (), "s3/models/tiny/@latest"),
        ("s3://models/tiny", ("*.json",), "s3/models/tiny/@latest" + patterns_key(["*.json"])),
    ],
)
def test_each_source_has_its_own_directory_in_the_cache(uri: str, patterns: tuple[str, ...], directory: str) -> None:
    """'@' starts no prefix component, so no other source's directory is named like an S3 source's."""
    assert str(revision_dir(parse(uri), patterns)) == directory


SHA = "0" * 64
# SHA256SUMS -> path -> sha256, or the start of the refusal
SUMS: list[tuple[str, dict[str, str] | str]] = [
    (
        f"{SHA}  config.json\n{'F' * 64} *weights/model.safetensors\n",
        {"config.json": SHA, "weights/model.safetensors": "f" * 64},
    ),
    (f"# made by sha256sum\n\n{SHA}  a b.txt\n", {"a b.txt": SHA}),
    (f"{SHA}  ../etc/passwd\n", "line 1: '../etc/passwd' is not a path under the prefix"),
    (f"{SHA}  /etc/passwd\n", "line 1: '/etc/passwd' is not a path under the prefix"),
    (f"{SHA}  a/./b\n", "line 1: 'a/./b' is not a path"),
    (f"{SHA}  a\n{SHA}  a\n", "line 2: 'a' is listed twice"),
    ("abc  a\n", "line 1 is not '<sha256>  <path>'"),
    ("\n", "it lists no file"),
    (f"{SHA}  a\n{SHA}  a/b\n", "line 2: 'a/b' is both a file and a directory"),
    (f"{SHA}  a/b/c\n{SHA}  a/b\n", "line 2: 'a/b' is both a file and a directory"),
    (f"{SHA}  a\tb\n", "line 1: 'a\\tb' is not a path"),
    (f"{SHA}  trainer-operator-model.json\n", "line 1: 'trainer-operator-model.json' is the name of the operator's"),
    (f"{SHA}  SHA256SUMS\n{SHA}  a\n", {"a": SHA}),  # sha256sum * run where it already was
]


@pytest.mark.parametrize(("text", "expected"), SUMS)
def test_an_s3_manifest_lists_paths_under_the_prefix_only(text: str, expected: dict[str, str] | str) -> None:
    if isinstance(expected, dict):
        assert verify.parse_sums(text, "SHA256SUMS", MANIFEST) == expected
    else:
        with pytest.raises(verify.ManifestError) as err:
            verify.parse_sums(text, "SHA256SUMS", MANIFEST)
        assert str(err.value).startswith(expected)


# file written, what the listing says -> the problem named (None: none)
CHECKS = [
    (b"abc", verify.Expected("f", 3, None, git_blob_id(b"abc")), None),
    (b"abd", verify.Expected("f", 3, None, git_blob_id(b"abc")), f"f: git blob id {git_blob_id(b'abd')} where"),
    (b"abc", verify.Expected("f", 3, hashlib.sha256(b"abc").hexdigest(), "pointer"), None),
    (b"abd", verify.Expected("f", 3, hashlib.sha256(b"abc").hexdigest(), "pointer"), "f: sha256 "),
    (b"abcd", verify.Expected("f", 3, None, git_blob_id(b"abc")), "f: 4 bytes where the source lists 3"),
    (None, verify.Expected("f", 3, None, git_blob_id(b"abc")), "f: missing after the download"),
]


@pytest.mark.parametrize(("content", "want", "problem"), CHECKS)
def test_each_file_is_checked_by_its_own_hash(
    tmp_path: Path, content: bytes | None, want: verify.Expected, problem: str | None
) -> None:
    if content is not None:
        (tmp_path / "f").write_bytes(content)
    found = verify.problem(tmp_path, want)
    assert found == problem if problem is None else (found or "").startswith(problem)


def hub_source(uri: str) -> HubSource:
    source = parse(uri)
    assert isinstance(source, HubSource)
    return source


@pytest.fixture
def hub() -> Iterator[HubServer]:
    with HubServer() as server:
        yield server


def lines() -> tuple[list[str], Callable[[str], None]]:
    """What the fetch says, and how it says it."""
    said: list[str] = []
    return said, said.append


def test_a_model_is_downloaded_checked_and_then_found_in_the_cache(hub: HubServer, tmp_path: Path) -> None:
    commit = hub.add(REPO, FILES)
    said, say = lines()
    first = fetch(hub_source(f"hf://{REPO}@main"), tmp_path, ["*.json", "*.safetensors"], hub.url, None, say)
    assert (first.commit, first.downloaded) == (commit, True)
    assert sorted(p.name for p in first.path.iterdir()) == sorted([MANIFEST, "config.json", "model.safetensors"])
    assert (first.path / "model.safetensors").read_bytes() == WEIGHTS
    assert first.path.is_symlink()  # the branch names the commit's directory
    assert "verified 2 files against the Hub's listing" in said[-1]
    assert hub.downloads() == 2

    again = fetch(hub_source(f"hf://{REPO}@main"), tmp_path, ["*.safetensors", "*.json"], hub.url, None, say)
    assert (again.path, again.downloaded) == (first.path, False)
    assert hub.downloads() == 2  # a second run of the same revision downloads nothing
    pinned = fetch(hub_source(f"hf://{REPO}@{commit}"), tmp_path, ["*.json", "*.safetensors"], hub.url, None, say)
    assert (pinned.downloaded, pinned.path.resolve()) == (False, first.path.resolve())


# what the Hub serves instead of a file -> how the refusal starts (the client itself checks only sizes)
TAMPERED = [
    ("model.safetensors", WEIGHTS[:-1] + b"\x00", "refused: model.safetensors: sha256 "),
    ("config.json", b'{"hidden": 9}\n', "refused: config.json: git blob id "),
    ("model.safetensors", b"shorter", "refused: model.safetensors: not the 16384 bytes the source lists "),
]


@pytest.mark.parametrize(("path", "served", "refusal"), TAMPERED)
def test_a_tampered_file_is_refused_by_name_and_nothing_is_kept(
    hub: HubServer, tmp_path: Path, path: str, served: bytes, refusal: str
) -> None:
    hub.add(REPO, FILES)
    hub.tamper(REPO, path, served)
    source = hub_source(f"hf://{REPO}@main")
    with pytest.raises(FetchError) as refused:
        fetch(source, tmp_path, [], hub.url, None, print)
    assert refused.value.reason == "HashMismatch"
    assert str(refused.value).startswith(refusal)
    assert [p.name for p in revision_path(tmp_path, source).parent.iterdir()] == [".lock"]


def test_a_private_model_needs_its_token_which_is_never_printed(
    hub: HubServer, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    token = "hf_secret_canary_4711"
    hub.add(REPO, FILES, token=token)
    source = hub_source(f"hf://{REPO}@main")
    with pytest.raises(FetchError, match="no repository acme/tiny that this token may read"):
        fetch(source, tmp_path, [], hub.url, None, print)
    caplog.set_level(logging.DEBUG)
    fetched = fetch(source, tmp_path, [], hub.url, token, print)
    assert fetched.downloaded
    assert f"Bearer {token}" in hub.authorizations
    printed = capsys.readouterr()
    assert token not in caplog.text + printed.out + printed.err
    assert token not in (fetched.path / MANIFEST).read_text()


def test_an_unknown_revision_is_named(hub: HubServer, tmp_path: Path) -> None:
    hub.add(REPO, FILES)
    with pytest.raises(FetchError, match="acme/tiny has no revision 'v9'"):
        fetch(hub_source(f"hf://{REPO}@v9"), tmp_path, [], hub.url, None, print)


def test_pods_fetching_at_once_download_the_revision_once(hub: HubServer, tmp_path: Path) -> None:
    hub.add(REPO, FILES)
    results: list[bool] = []

    def one() -> None:
        results.append(fetch(hub_source(f"hf://{REPO}@main"), tmp_path, [], hub.url, None, lambda _: None).downloaded)

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(results) == [False, False, True]
    assert hub.downloads() == len(FILES)


def init(source: str, cache: Path, endpoint: str, log: Path) -> tuple[int, tuple[str, str]]:
    """The initializer run as the trainer runs it: its exit code and its termination message read
    as the trainer reads it."""
    code = cli.main(["--source", source, "--cache", str(cache), "--endpoint", endpoint, "--termination-log", str(log)])
    return code, read_termination(log.read_text())


def test_the_init_container_reports_its_outcome_in_its_termination_message(hub: HubServer, tmp_path: Path) -> None:
    commit = hub.add(REPO, FILES)
    log = tmp_path / "termination-log"
    code, (reason, message) = init(f"hf://{REPO}@main", tmp_path / "cache", hub.url, log)
    assert (code, reason) == (0, VERIFIED)
    assert message == f"hf://{REPO}@main at commit {commit}: 3 files downloaded and checked"
    code, (reason, message) = init(f"hf://{REPO}@main", tmp_path / "cache", hub.url, log)
    assert (code, reason, message.endswith("3 files found checked in the cache")) == (0, VERIFIED, True)

    hub.tamper(REPO, "config.json", b'{"hidden": 9}\n')
    code, (reason, message) = init(f"hf://{REPO}@main", tmp_path / "other-cache", hub.url, log)
    assert (code, reason) == (1, "HashMismatch")
    assert message.startswith("refused: config.json: git blob id ")
    code, (reason, message) = init("hf://acme", tmp_path, hub.url, log)
    assert (code, reason, message) == (
        1,
        "InvalidSource",
        "model source 'hf://acme': 'acme' is not a Hub repository <org>/<name> "
        "(letters, digits, '-', '_', '.'; no '--' or '..'; at most 96 characters each)",
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("HashMismatch: refused: a.bin: ...", ("HashMismatch", "refused: a.bin: ...")),
        ("Verified: hf://a/b@main at commit c: 2 files", ("Verified", "hf://a/b@main at commit c: 2 files")),
        # no reason: the container died before it wrote one (its log's tail)
        ("Traceback (most recent call last):\n  ...", ("FetchFailed", "Traceback (most recent call last):\n  ...")),
        ("error: x", ("FetchFailed", "error: x")),
    ],
)
def test_a_termination_message_is_read_as_reason_and_message(text: str, expected: tuple[str, str]) -> None:
    assert read_termination(text) == expected


def test_a_hub_that_cannot_be_reached_is_named(tmp_path: Path) -> None:
    with HubServer() as hub:
        gone = hub.url  # a port nothing listens on once the server stops
    with pytest.raises(FetchError, match=f"cannot fetch hf://acme/tiny@main from {gone}: "):
        fetch(hub_source(f"hf://{REPO}@main"), tmp_path, [], gone, None, print)
