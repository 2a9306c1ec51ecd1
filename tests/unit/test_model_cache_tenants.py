"""The shared model cache between tenants (issue 51), on real directories: a checked revision is
read-only in sticky directories, so another user of the claim's group can neither change it nor
rename or remove it or its link; a revision found changed is not trusted (its owner fetches it
again, another user refuses it: CacheTampered); no link the initializer did not make is followed."""

import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed.hfhub import HubServer
from tests import users
from tests.unit.test_model_init import hub, hub_source
from trainerop_models.cache import MANIFEST, FetchError
from trainerop_models.fetch import Fetched, fetch

__all__ = ["hub"]  # the fixture: the Hub's API served on loopback

REPO = "acme/tiny"
FILES = {"config.json": b'{"hidden": 8}\n', "model.safetensors": bytes(range(256)) * 64}
ALICE, BOB, GROUP = 1000, 1001, 3000  # two users of the claim's group (its fsGroup)


def get(hub: HubServer, cache: Path, revision: str = "main", said: list[str] | None = None) -> Fetched:
    say = (said if said is not None else []).append
    return fetch(hub_source(f"hf://{REPO}@{revision}"), cache, [], hub.url, None, say)


def modes(root: Path) -> set[int]:
    return {stat.S_IMODE(p.lstat().st_mode) for p in [root, *root.rglob("*")]}


# One user: what a fetch leaves, and a revision changed since it was checked.


def test_a_checked_revision_is_read_only_in_sticky_directories(hub: HubServer, tmp_path: Path) -> None:
    hub.add(REPO, FILES)
    fetched = get(hub, tmp_path)
    commit_dir = fetched.path.resolve()
    assert modes(commit_dir) == {0o555, 0o444}
    assert (commit_dir / "model.safetensors").stat().st_mode & 0o777 == 0o444
    assert all(stat.S_IMODE((tmp_path / d).stat().st_mode) == 0o1775 for d in ("hf", "hf/acme", "hf/acme/tiny"))
    assert sorted(p.name for p in commit_dir.parent.iterdir()) == [".lock", fetched.commit, "main"]


def make_writable(revision: Path) -> None:
    revision.chmod(0o775)  # as an earlier release left it


def rewrite_a_file(revision: Path) -> None:
    (revision / "config.json").chmod(0o644)
    (revision / "config.json").write_bytes(b'{"hidden": 9}\n')


def add_a_link(revision: Path) -> None:
    revision.chmod(0o755)
    (revision / "extra.bin").symlink_to("/etc/hostname")
    revision.chmod(0o555)


def replace_a_file_by_a_link(revision: Path) -> None:
    revision.chmod(0o755)
    (revision / "config.json").unlink()
    (revision / "config.json").symlink_to("/etc/hostname")
    revision.chmod(0o555)


def remove_the_manifest(revision: Path) -> None:
    revision.chmod(0o755)
    (revision / MANIFEST).unlink()
    revision.chmod(0o555)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (make_writable, "has . writable (mode 775)"),
        (rewrite_a_file, "has config.json writable (mode 644)"),
        (add_a_link, "holds extra.bin, which is a link or not a plain file"),
        (replace_a_file_by_a_link, "holds config.json, which is a link or not a plain file"),
        (remove_the_manifest, "has no manifest"),
    ],
)
def test_a_revision_changed_after_it_was_checked_is_fetched_again(
    hub: HubServer, tmp_path: Path, change: Callable[[Path], None], said: str
) -> None:
    hub.add(REPO, FILES)
    revision = get(hub, tmp_path).path.resolve()
    change(revision)
    lines: list[str] = []
    again = get(hub, tmp_path, said=lines)
    assert again.downloaded
    assert f"{revision} {said}: not as it was checked; fetching it again" in lines
    assert {p: (revision / p).read_bytes() for p in FILES} == FILES
    assert modes(revision) == {0o555, 0o444}
    assert not (revision / "extra.bin").exists()


def test_a_link_where_the_cache_has_a_directory_is_not_followed(hub: HubServer, tmp_path: Path) -> None:
    hub.add(REPO, FILES)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache" / "hf").mkdir(parents=True)
    (tmp_path / "cache" / "hf" / "acme").symlink_to(elsewhere)
    with pytest.raises(FetchError) as refused:
        get(hub, tmp_path / "cache")
    assert refused.value.reason == "CacheTampered"
    assert f"{tmp_path}/cache/hf/acme is a link or a file where the cache has a directory" in str(refused.value)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize(
    "plant", [lambda p: p.symlink_to("/etc/hostname"), lambda p: os.mkfifo(p)], ids=["link", "pipe"]
)
def test_a_lock_that_is_not_a_plain_file_is_refused(
    hub: HubServer, tmp_path: Path, plant: Callable[[Path], None]
) -> None:
    hub.add(REPO, FILES)
    (tmp_path / "hf" / "acme" / "tiny").mkdir(parents=True)
    plant(tmp_path / "hf" / "acme" / "tiny" / ".lock")
    with pytest.raises(FetchError) as refused:
        get(hub, tmp_path)
    assert refused.value.reason == "CacheTampered"
    assert "/hf/acme/tiny/.lock is " in str(refused.value)


def test_a_shared_directory_of_this_user_is_made_sticky_and_another_users_is_said(hub: HubServer) -> None:
    hub.add(REPO, FILES)
    with tempfile.TemporaryDirectory() as folder:
        claim = Path(folder)
        claim.chmod(0o2775)  # as a volume with a fsGroup, of this user
        (claim / "hf").mkdir()
        (claim / "hf").chmod(0o775)  # as an earlier release made it
        lines: list[str] = []
        get(hub, claim, said=lines)
        assert stat.S_IMODE(claim.stat().st_mode) == 0o3775
        assert stat.S_IMODE((claim / "hf").stat().st_mode) == 0o1775
        assert not [line for line in lines if line.startswith("warning")]
        if os.geteuid() == 0:
            os.chown(claim, ALICE, GROUP)
            claim.chmod(0o2775)
            get(hub, claim, said=lines)
            assert f"warning: {claim} (uid {ALICE}, mode 2775) is writable by other users and not sticky" in lines[-2]


# Two users of one group sharing the claim, as two tenants' pods would.


def as_user(uid: int, run: Callable[[], object]) -> str:
    """``run()`` in a child switched to ``uid`` in the claim's group: what it returned, or the
    name of what it raised."""
    return users.as_user(uid, GROUP, run)


@pytest.fixture
def claim() -> Iterator[Path]:
    """A claim's root as a volume with a fsGroup has it, made sticky by its administrator."""
    with tempfile.TemporaryDirectory() as folder:
        os.chown(folder, 0, GROUP)
        os.chmod(folder, 0o3775)
        yield Path(folder)


def fetched(hub: HubServer, cache: Path, revision: str = "main") -> Callable[[], object]:
    def run() -> object:
        got = get(hub, cache, revision)
        return f"{got.path.name} {'downloaded' if got.downloaded else 'found'} {got.note}".strip()

    return run


def attempt(action: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        action()
        return "done"

    return run


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users takes root")


def swap(link: Path, temporary: Path) -> None:
    """``link`` replaced as the initializer moves a link: a new one renamed over it."""
    temporary.symlink_to("elsewhere")
    os.replace(temporary, link)


@needs_root
def test_another_user_of_the_group_cannot_change_a_checked_revision_and_shares_it(hub: HubServer, claim: Path) -> None:
    commit = hub.add(REPO, FILES)
    assert as_user(ALICE, fetched(hub, claim)) == "main downloaded"
    model = claim / "hf" / "acme" / "tiny"
    revision = model / commit
    forged = model / "forged"
    attempts: dict[str, Callable[[], object]] = {
        "rewrite a file": lambda: (revision / "config.json").write_bytes(b"{}"),
        "make a file writable": lambda: (revision / "config.json").chmod(0o666),
        "add a file": lambda: (revision / "extra.bin").write_bytes(b"x"),
        "rename the revision": lambda: revision.rename(model / "away"),
        "remove a file": lambda: (revision / "config.json").unlink(),
        "remove the revision": lambda: shutil.rmtree(revision),
        "replace the link": lambda: swap(model / "main", forged),
        "remove the link": lambda: (model / "main").unlink(),
        "rename the model": lambda: model.rename(model.parent / "away"),
        "rename the lock": lambda: (model / ".lock").rename(model / "lock"),
    }
    refused = {what: as_user(BOB, attempt(action)) for what, action in attempts.items()}
    assert all(answer.startswith("PermissionError") for answer in refused.values()), refused
    assert {p: (revision / p).read_bytes() for p in FILES} == FILES
    assert os.readlink(model / "main") == commit
    assert as_user(BOB, fetched(hub, claim)) == "main found"  # the group shares it
    assert as_user(ALICE, fetched(hub, claim)) == "main found"  # still as it was checked


@needs_root
def test_a_link_of_another_user_is_left_and_the_run_told_the_commits_directory(hub: HubServer, claim: Path) -> None:
    first = hub.add(REPO, FILES)
    assert as_user(ALICE, fetched(hub, claim)) == "main downloaded"
    second = hub.add(REPO, {**FILES, "config.json": b'{"hidden": 16}\n'})
    answer = as_user(BOB, fetched(hub, claim))
    model = claim / "hf" / "acme" / "tiny"
    assert answer == (
        f"{second} downloaded main is uid {ALICE}'s and names {first}: this user cannot move it; the checked "
        f"revision is {model / second}"
    )
    assert (model / second / "config.json").read_bytes() == b'{"hidden": 16}\n'
    assert as_user(ALICE, fetched(hub, claim)) == "main found"  # its own link: moved to the new commit
    assert os.readlink(model / "main") == second


def forge(cache: Path, commit: str) -> None:
    """What another user could put where a revision goes: a link to a directory of its own with
    a manifest listing its files, all read-only."""
    model = cache / "hf" / "acme" / "tiny"
    for directory in (model.parent.parent, model.parent, model):
        directory.mkdir()
        directory.chmod(0o1775)  # as the initializer makes them
    forged = cache / "forged"
    forged.mkdir()
    (forged / "config.json").write_bytes(b'{"forged": 1}\n')
    (forged / MANIFEST).write_text('{"files": {"config.json": {}}}')
    for path in (forged / "config.json", forged / MANIFEST, forged):
        path.chmod(0o555 if path.is_dir() else 0o444)
    (model / commit).symlink_to(forged)


@needs_root
def test_another_users_revision_that_is_not_as_checked_is_refused(hub: HubServer, claim: Path) -> None:
    commit = hub.add(REPO, FILES)
    assert as_user(BOB, fetched(hub, claim, commit)) == f"{commit} downloaded"
    revision = claim / "hf" / "acme" / "tiny" / commit
    assert as_user(BOB, attempt(lambda: revision.chmod(0o775))) == "done"  # its owner can
    answer = as_user(ALICE, fetched(hub, claim, commit))
    assert answer.startswith(f"FetchError: CacheTamperedrefused: {revision} has . writable (mode 775) (uid {BOB}'s")
    assert "its owner or an administrator must remove it" in answer


@needs_root
def test_a_revision_that_is_another_users_link_is_not_followed(hub: HubServer, claim: Path) -> None:
    commit = hub.add(REPO, FILES)
    assert as_user(BOB, attempt(lambda: forge(claim, commit))) == "done"
    answer = as_user(ALICE, fetched(hub, claim, commit))
    assert answer.startswith(
        f"FetchError: CacheTamperedrefused: {claim}/hf/acme/tiny/{commit} is a link or a file, not a revision's "
        f"directory (uid {BOB}'s"
    )
