"""The program the checkpoint controller's storage pods run (``python -m
trainerop_checkpoint.pvc_worker``, from the operator's image): on the claim mounted at /checkpoints,
a verifier reads the copies it is asked about and a collector deletes checkpoint directories, both
without following a symlink (tenants may share the claim); each answers with one letter per item
in its termination message (the protocol is in :mod:`trainerop_checkpoint.pvc_pods`)."""

import json
import os
import sys
from collections.abc import Callable

from trainerop_common.checkpoint_layout import MOUNT
from trainerop_common.checkpoint_storage import Location, open_location

from .decide import copy_state
from .pvc_pods import COLLECT_ENV, DELETED, FAILED, LETTERS, TERMINATION_LOG, VERIFY_ENV


def on_claim(path: str, root: str | None = None) -> Location:
    """A checkpoint directory on the mounted claim (``root``: where a test has it), reached only
    through real directories: another tenant sharing the claim may plant a symlink anywhere."""
    return open_location(path, local_root=root, follow_symlinks=False)


def check(request: str, root: str | None = None) -> str:
    """One letter per requested copy: what reading it on the mounted claim found (a copy reached
    through a symlink, or not a regular file, is unreadable)."""
    letters = []
    for path, key, sha256, size in json.loads(request):
        try:
            found = on_claim(path, root).sha256(key)
        except (OSError, ValueError):
            letters.append(LETTERS["unreadable"])
            continue
        letters.append(LETTERS[copy_state(found, sha256, size)])
    return "".join(letters)


def inside_mount(path: str) -> bool:
    """A checkpoint directory on the claim: /checkpoints/<trainer>/<more>, nothing that climbs out."""
    parts = path.split("/")
    return path.startswith(MOUNT + "/") and len(parts) >= 4 and all(p not in ("", ".", "..") for p in parts[1:])


def collect(request: str, delete: Callable[[str], object] = lambda p: on_claim(p).delete_all()) -> str:
    """One letter per requested directory: deleted (or already gone), or an error (a symlink as
    any part of its path is one: nothing is deleted through it)."""
    letters = []
    for path in json.loads(request):
        if not isinstance(path, str) or not inside_mount(path):
            letters.append(FAILED)
            continue
        try:
            delete(path)
        except (OSError, ValueError) as err:
            print(f"deleting {path} failed: {err}", file=sys.stderr)
            letters.append(FAILED)
            continue
        letters.append(DELETED)
    return "".join(letters)


def main(argv: list[str] | None = None) -> int:
    """The pods run it without arguments; a tool may name where it sees the claim (``[ROOT]``)."""
    args = sys.argv[1:] if argv is None else argv
    root = args[0] if args else None
    verify, remove = os.environ.get(VERIFY_ENV), os.environ.get(COLLECT_ENV)
    if verify is not None:
        letters = check(verify, root)
        summary = f"checked {len(letters)} copies: {letters.count(LETTERS['ok'])} ok"
    elif remove is not None:
        letters = collect(remove, lambda p: on_claim(p, root).delete_all())
        summary = f"deleted {letters.count(DELETED)} of {len(letters)} checkpoint directories"
    else:
        print(
            f"neither {VERIFY_ENV} nor {COLLECT_ENV} is set: this program runs in the checkpoint controller's pods",
            file=sys.stderr,
        )
        return 2
    with open(os.environ.get("TRAINEROP_TERMINATION_LOG", TERMINATION_LOG), "w") as log:
        log.write(letters)
    print(summary, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
