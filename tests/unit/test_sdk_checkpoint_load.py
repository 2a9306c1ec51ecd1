"""What load() makes of a shard's copies and of its Checkpoint's phase (the API calls are in
tests/integration/test_checkpoints.py), and how a pod that cannot load ends (issue 51)."""

import hashlib
import subprocess
import sys
from typing import Any

import pytest

from trainerop_sdk.checkpoint import CheckpointError, CheckpointUnreadable, _first_good_copy, _not_resumable

GOOD = b"weights"


class Copies:
    """A checkpoint's copies by key: bytes, None (not there) or an exception (the storage failed)."""

    def __init__(self, copies: dict[str, bytes | Exception | None]) -> None:
        self.copies = copies

    def get(self, key: str) -> bytes | None:
        found = self.copies.get(key)
        if isinstance(found, Exception):
            raise found
        return found


KEYS = ["copy-0", "copy-1", "copy-2"]


@pytest.mark.parametrize(
    ("copies", "data", "verdicts"),
    [
        pytest.param({"copy-0": GOOD}, GOOD, {}, id="the first copy"),
        pytest.param(
            {"copy-0": b"bit rot", "copy-2": GOOD},
            GOOD,
            {"copy-0": "sha256 mismatch", "copy-1": "missing"},
            id="one bad, one gone",
        ),
        pytest.param(
            {"copy-1": b"x"}, None, {"copy-0": "missing", "copy-1": "sha256 mismatch", "copy-2": "missing"}, id="none"
        ),
        pytest.param(
            {"copy-0": OSError("EIO"), "copy-1": GOOD},
            GOOD,
            {"copy-0": "error: OSError: EIO"},
            id="an error, then good",
        ),
    ],
)
def test_the_first_copy_with_the_reported_sha256_is_loaded(
    copies: dict[str, Any], data: bytes | None, verdicts: dict[str, str]
) -> None:
    report = {"copies": KEYS, "sha256": hashlib.sha256(GOOD).hexdigest()}
    assert _first_good_copy(Copies(copies), report) == (data, verdicts)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "resumable"),
    [
        ({}, True),
        ({"phase": "Committed"}, True),
        ({"phase": "Failed", "reason": "Unreadable", "message": "m"}, False),
        ({"phase": "GarbageCollected"}, False),
    ],
)
def test_only_a_committed_checkpoint_is_resumed_from(status: dict[str, str], resumable: bool) -> None:
    assert (not _not_resumable({"status": status})) is resumable


def test_an_unreadable_checkpoint_ends_the_process_with_143_whatever_the_training_code_catches() -> None:
    """A SystemExit: ``except Exception`` (or ``except CheckpointError``) around load() cannot
    make a rank start over from scratch while the others resume."""
    assert not issubclass(CheckpointUnreadable, Exception)
    assert issubclass(CheckpointError, Exception)
    script = (
        "from trainerop_sdk.checkpoint import CheckpointUnreadable\n"
        "try:\n    raise CheckpointUnreadable('no copy of shard 1')\nexcept Exception:\n    print('caught')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (143, "")
    assert str(CheckpointUnreadable("no copy of shard 1")) == "no copy of shard 1"
