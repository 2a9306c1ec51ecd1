"""save_on_sigterm's way out: exit 143 either way; with hard_exit, exit handlers (JAX's shutdown
barrier waits for peers that may be gone) do not run."""

import signal
import subprocess
import sys

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
time.sleep(60)
"""


@pytest.mark.parametrize(("mode", "handlers_run"), [("soft", True), ("hard", False)])
def test_the_save_on_sigterm_exits_143_and_hard_exit_skips_exit_handlers(mode: str, handlers_run: bool) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143
    assert "checkpoint on SIGTERM failed" in err
    assert ("exit handler ran" in out) is handlers_run
