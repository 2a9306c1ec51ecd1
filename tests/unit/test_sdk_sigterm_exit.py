"""save_on_sigterm's way out: exit 143 either way; with hard_exit, exit handlers (JAX's shutdown
barrier waits for peers that may be gone) do not run."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = """
import atexit, sys, time
from trainerop_sdk.checkpoint import Checkpointer
from trainerop_sdk.kubeapi import ApiClient
atexit.register(lambda: print("exit handler ran", flush=True))
# Nothing listens there: the save fails at once, the process still leaves with 143.
api = ApiClient("https://127.0.0.1:9", "token", "ns")
ckpt = Checkpointer(api=api, trainer="t", directory="/nonexistent/dir")
ckpt.save_on_sigterm(lambda: (b"state", 1, 0), hard_exit=sys.argv[1] == "hard")
print("ready", flush=True)
if sys.argv[2] == "writing":
    # Write until the pipe is full (nobody reads it): the SIGTERM then comes while this thread is
    # inside a buffered write to stdout, as a training loop that logs a lot often is.
    while True:
        sys.stdout.write("x" * 65536)
        sys.stdout.flush()
time.sleep(60)
"""


@pytest.mark.parametrize("doing", ["sleeping", "writing"])
@pytest.mark.parametrize(("mode", "handlers_run"), [("soft", True), ("hard", False)])
def test_the_save_on_sigterm_exits_143_and_hard_exit_skips_exit_handlers(
    mode: str, handlers_run: bool, doing: str
) -> None:
    """``writing``: the signal lands while the main thread is blocked in a write to stdout (a
    training loop that logs a lot, its reader slow): the handler reports with an unbuffered write
    and flushes only what it can, so it leaves with 143 all the same."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, mode, doing], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    if doing == "writing":
        wait_until_blocked(proc.pid)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert "checkpoint on SIGTERM failed" in err
    assert ("exit handler ran" in out) is handlers_run


def wait_until_blocked(pid: int, timeout: float = 10) -> None:
    """Until the process sleeps in the kernel with its stdout pipe full (the write blocks)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        wchan = Path(f"/proc/{pid}/wchan").read_text()
        if "pipe" in wchan:
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} never blocked on its stdout pipe (wchan {wchan!r})")
