"""Interactive ranks (trainerop_sdk.interactive): the pod's process keeps a cell's variables for
the next, prints a last expression's value, streams what a cell prints, survives a failing cell
and says so with exit code 1; a pod without it says what to do (issue 21). The server runs as the
pod runs it: a process of its own."""

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainerop_sdk.interactive import SOCKET_ENV, run


@pytest.fixture
def rank(tmp_path: Path) -> Iterator[str]:
    path = str(tmp_path / "rank.sock")
    server = subprocess.Popen(
        [sys.executable, "-m", "trainerop_sdk.interactive", "serve"],
        env={**os.environ, SOCKET_ENV: path},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    assert "waiting for cells" in server.stdout.readline()
    yield path
    server.kill()
    server.wait()


def cell(path: str, source: str) -> tuple[int, str]:
    out = io.StringIO()
    return run(source, path, out), out.getvalue()


def test_cells_share_one_namespace_as_in_a_kernel(rank: str) -> None:
    assert cell(rank, "x = 21\nprint('set')") == (0, "set\n")
    assert cell(rank, "x * 2") == (0, "42\n")  # a last bare expression is shown, as a REPL shows it
    assert cell(rank, "print('ü' * 40000, end='')") == (0, "ü" * 40000 + "\n")  # split across reads, whole


def test_a_failing_cell_shows_its_traceback_and_the_rank_goes_on(rank: str) -> None:
    code, out = cell(rank, "y = 1\nraise ValueError('bad input')")
    assert code == 1
    assert "ValueError: bad input" in out
    assert cell(rank, "y") == (0, "1\n")  # what ran before the error stays
    code, out = cell(rank, "import sys; sys.exit(3)")  # a cell's exit ends the cell, not the rank
    assert code == 1
    assert cell(rank, "'still here'") == (0, "'still here'\n")


def test_a_pod_that_is_not_interactive_says_so(tmp_path: Path) -> None:
    code, out = cell(str(tmp_path / "none.sock"), "1")
    assert code == 2
    assert "create the Trainer with TrainerClient.interactive" in out


def test_output_comes_while_the_cell_runs(rank: str, tmp_path: Path) -> None:
    """The cell waits for the notebook's side to have received its first line: were output held
    until the cell ends, it would wait in vain."""
    seen = tmp_path / "first-line-arrived"

    class Notebook(io.StringIO):
        def write(self, text: str) -> int:
            if text == "first\n":
                seen.touch()
            return super().write(text)

    source = f"""
import pathlib, time
print('first', flush=True)
for _ in range(300):
    if pathlib.Path({str(seen)!r}).exists():
        break
    time.sleep(0.1)
print('second' if pathlib.Path({str(seen)!r}).exists() else 'held back')
"""
    out = Notebook()
    assert run(source, rank, out) == 0
    assert out.getvalue() == "first\nsecond\n"
