"""``trainerop-model-init``: the init container that puts a run's model into the shared cache
before its training container starts (docs/design/trusted-artifacts.md, decision 4).

    trainerop-model-init --source hf://acme/tiny@main --cache /models [--files '*.json' ...]
    trainerop-model-init --source s3://models/llama-tiny@sha256:<hex> --cache /models

The token, when the model needs one, comes from the environment (``HF_TOKEN``, from a Secret),
and so do an S3 source's credentials (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_ENDPOINT_URL``, ``AWS_REGION``); neither is ever printed. Progress goes to stdout; a
failure is printed, written to the container's termination message (which the trainer reports),
and exits 1."""

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from trainerop_sdk.models import VERIFIED, HubSource, S3Source, SourceError, parse, termination_message

from .cache import Fetched, FetchError

DEFAULT_ENDPOINT = "https://huggingface.co"
TERMINATION_LOG = Path("/dev/termination-log")
# The client reads its settings once, when imported: these are set first. No Xet storage (a
# plain HTTP download is what is checked), no telemetry.
CLIENT_SETTINGS = {"HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def say(line: str) -> None:
    print(line, flush=True)


def report(reason: str, message: str, termination_log: Path) -> None:
    """The outcome in the container's termination message, which the trainer reads."""
    if termination_log.parent.is_dir():
        with contextlib.suppress(OSError):
            termination_log.write_text(termination_message(reason, message))


def failed(reason: str, message: str, termination_log: Path) -> int:
    print(f"error: {message}", file=sys.stderr, flush=True)
    report(reason, message, termination_log)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--source", required=True, help="hf://<org>/<name>@<revision> or s3://<bucket>/<prefix>")
    parser.add_argument("--cache", type=Path, default=Path("/models"), help="the shared cache volume's mount")
    parser.add_argument("--files", action="append", default=[], help="a glob of the files wanted (repeatable)")
    parser.add_argument("--endpoint", default=os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT)
    parser.add_argument("--termination-log", type=Path, default=TERMINATION_LOG)
    args = parser.parse_args(argv)
    try:
        source = parse(args.source)
    except SourceError as err:
        return failed("InvalidSource", str(err), args.termination_log)
    try:
        fetched = fetch_hub(source, args) if isinstance(source, HubSource) else fetch_s3(source, args)
    except FetchError as err:
        return failed(err.reason, str(err), args.termination_log)
    how = "downloaded and checked" if fetched.downloaded else "found checked in the cache"
    version = f"commit {fetched.commit}" if isinstance(source, HubSource) else f"manifest sha256:{fetched.commit}"
    note = f"; {fetched.note}" if fetched.note else ""
    report(VERIFIED, f"{source} at {version}: {fetched.files} files {how}{note}", args.termination_log)
    say(f"ready: {fetched.path}")
    return 0


def fetch_hub(source: HubSource, args: argparse.Namespace) -> Fetched:
    for key, value in CLIENT_SETTINGS.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("HF_HOME", str(args.cache / ".hf-home"))  # the image's root is read-only
    from .fetch import fetch  # after the settings: the client reads them on import

    return fetch(source, args.cache, args.files, args.endpoint, os.environ.get("HF_TOKEN") or None, say)


def fetch_s3(source: S3Source, args: argparse.Namespace) -> Fetched:
    from trainerop_sdk.s3 import Credentials

    from .s3fetch import fetch_s3 as fetch

    try:
        creds = Credentials.from_env()
    except ValueError as err:
        raise FetchError("InvalidCredentials", f"{err}: the model's credentialsSecret") from None
    return fetch(source, args.cache, args.files, creds, say)


if __name__ == "__main__":
    sys.exit(main())
