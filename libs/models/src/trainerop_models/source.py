"""Where a model comes from (pure): ``hf://org/name@revision``, a model repository of the Hugging
Face Hub at a branch, tag or commit."""

import re
from dataclasses import dataclass

HF_SCHEME = "hf://"
# The Hub's repository names: letters, digits, "-", "_" and "."; no "--" or ".."; at most 96 characters.
NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")
COMMIT = re.compile(r"[0-9a-f]{40}")
REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,254}")


class SourceError(ValueError):
    """The source cannot be read; the message says what is expected."""


@dataclass(frozen=True)
class HubSource:
    repo_id: str  # org/name
    revision: str  # a branch, a tag or a commit

    @property
    def pinned(self) -> bool:
        """Whether the revision is a commit (nothing to resolve, nothing that can move)."""
        return bool(COMMIT.fullmatch(self.revision))

    def __str__(self) -> str:
        return f"{HF_SCHEME}{self.repo_id}@{self.revision}"


def _name_ok(name: str) -> bool:
    return bool(NAME.fullmatch(name)) and "--" not in name and ".." not in name


def parse(uri: str) -> HubSource:
    """``hf://org/name@revision``; raises SourceError naming what is wrong."""
    if not uri.startswith(HF_SCHEME):
        raise SourceError(f"model source {uri!r}: expected hf://<org>/<name>@<revision>")
    repo_id, at, revision = uri.removeprefix(HF_SCHEME).partition("@")
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(_name_ok(p) for p in parts):
        raise SourceError(
            f"model source {uri!r}: {repo_id!r} is not a Hub repository <org>/<name> (letters, digits, '-', '_', "
            "'.'; no '--' or '..'; at most 96 characters each)"
        )
    if not at or not revision:
        raise SourceError(
            f"model source {uri!r}: name the revision after '@' (a commit, or a branch or tag): a run must say "
            "which weights it trains from"
        )
    if not REVISION.fullmatch(revision) or ".." in revision or revision.endswith(("/", ".lock")):
        raise SourceError(f"model source {uri!r}: {revision!r} is not a revision (a commit, branch or tag name)")
    return HubSource(repo_id, revision)
