"""Where a model comes from, and where a pod finds it (pure): ``hf://org/name@revision``, a model
repository of the Hugging Face Hub at a branch, tag or commit. The Trainer's schema, the trainer
controller (``MODEL_PATH``) and the model initializer all read a source by these rules."""

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

HF_SCHEME = "hf://"
# The Hub's repository names: letters, digits, "-", "_" and "."; no "--" or ".."; at most 96 characters.
NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
COMMIT = re.compile(r"[0-9a-f]{40}")
REVISION = r"[A-Za-z0-9][A-Za-z0-9._/-]{0,254}"
# The whole source as one expression (the schema's pattern); parse() says precisely what is wrong.
SOURCE_PATTERN = f"^hf://{NAME}/{NAME}@{REVISION}$"
EXAMPLE = "hf://<org>/<name>@<revision>"


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
    return bool(re.fullmatch(NAME, name)) and "--" not in name and ".." not in name


def parse(uri: str) -> HubSource:
    """``hf://org/name@revision``; raises SourceError naming what is wrong."""
    if not uri.startswith(HF_SCHEME):
        raise SourceError(f"model source {uri!r}: expected {EXAMPLE}")
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
    if not re.fullmatch(REVISION, revision) or ".." in revision or revision.endswith(("/", ".lock")):
        raise SourceError(f"model source {uri!r}: {revision!r} is not a revision (a commit, branch or tag name)")
    return HubSource(repo_id, revision)


def patterns_key(patterns: Sequence[str]) -> str:
    """A directory per set of file patterns: the same revision with other patterns is another fetch."""
    if not patterns:
        return ""
    return "-" + hashlib.sha256("\n".join(sorted(set(patterns))).encode()).hexdigest()[:8]


def revision_dir(source: HubSource, patterns: Sequence[str] = ()) -> PurePosixPath:
    """Where, under the cache's root, a pod finds the model's files (``MODEL_PATH``): a directory
    of the commit, or a link to it for a branch or tag."""
    org, name = source.repo_id.split("/")
    return PurePosixPath("hf", org, name, source.revision.replace("/", "%2F") + patterns_key(patterns))


# What the model initializer leaves in its container's termination message, which the trainer
# controller turns into the Trainer's ModelVerified condition: "<Reason>: <message>".
VERIFIED = "Verified"  # the files are in the cache, checked; any other reason is a refusal
MAX_TERMINATION = 4000  # the kubelet keeps 4096 bytes


def termination_message(reason: str, message: str) -> str:
    return f"{reason}: {message}"[:MAX_TERMINATION]


def read_termination(text: str) -> tuple[str, str]:
    """(reason, message) of a termination message; one without a reason (the container died
    before it wrote one: its log's tail) is a ``FetchFailed``."""
    reason, colon, message = text.strip().partition(": ")
    if colon and re.fullmatch(r"[A-Z][A-Za-z]{1,63}", reason):
        return reason, message
    return "FetchFailed", text.strip()


INIT_CONTAINER = "model-init"  # the name of the initializer's container in a training pod
