"""Interactive ranks: a Trainer's pods keep one Python process each, and code sent from a notebook
runs in it, with its variables kept from cell to cell (the client's ``%%trainer`` magic,
docs/data-scientists.md).

    python3 -m trainerop_sdk.interactive serve    # the pod's command: waits for cells
    python3 -m trainerop_sdk.interactive run      # a cell on stdin, its output on stdout (kubectl exec)

``serve`` listens on a Unix socket inside the container (owner-only), so only someone allowed to
``exec`` into the pod (RBAC ``pods/exec``) can send code; ``run`` is what the client executes in
each pod for each cell. Cells run one at a time, in one namespace, as a REPL runs them: the value
of a last bare expression is printed. What the cell prints comes back as it is printed; a cell
that raises prints its traceback, and ``run`` exits 1. Only the standard library is used.
"""

from __future__ import annotations

import ast
import codecs
import contextlib
import io
import os
import socket
import sys
import traceback
from pathlib import Path
from typing import Any, TextIO, cast

SOCKET_ENV = "TRAINER_INTERACTIVE_SOCKET"
DEFAULT_SOCKET = "/tmp/trainer-interactive.sock"
DONE = "\x00trainer-interactive:"  # the last line of a cell's output: DONE + "ok" or "error"
MAX_CELL = 16 * 1024 * 1024


def socket_path() -> str:
    return os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET


class Stream(io.TextIOBase):
    """A file whose writes go to the connection as they are made (the cell's stdout and stderr)."""

    def __init__(self, conn: socket.socket) -> None:
        super().__init__()
        self._conn = conn
        self.at_line_start = True

    def write(self, text: str) -> int:
        if text:
            self.at_line_start = text.endswith("\n")
        with contextlib.suppress(OSError):  # the notebook went away: the cell still finishes
            self._conn.sendall(text.encode())
        return len(text)

    def done(self, ok: bool) -> None:
        """The marker line that ends a cell's output."""
        self.write(("" if self.at_line_start else "\n") + DONE + ("ok" if ok else "error") + "\n")


def execute(source: str, namespace: dict[str, Any], out: TextIO) -> bool:
    """Run a cell in ``namespace`` as a REPL would (a last bare expression's value is printed);
    whether it ran without an exception (else the traceback went to ``out``)."""
    try:
        tree = ast.parse(source, "<cell>")
        last = tree.body[-1] if tree.body else None
        shown = last.value if isinstance(last, ast.Expr) else None
        if shown is not None:
            tree.body.pop()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            exec(compile(tree, "<cell>", "exec"), namespace)
            if shown is not None:
                value = eval(compile(ast.Expression(shown), "<cell>", "eval"), namespace)
                if value is not None:
                    print(repr(value))
        return True
    except BaseException:  # SystemExit and KeyboardInterrupt of a cell end the cell, not the rank
        out.write(traceback.format_exc())
        return False


def receive(conn: socket.socket) -> str:
    chunks, size = [], 0
    while chunk := conn.recv(65536):
        size += len(chunk)
        if size > MAX_CELL:
            raise ValueError(f"a cell of more than {MAX_CELL} bytes")
        chunks.append(chunk)
    return b"".join(chunks).decode()


def serve(path: str | None = None) -> None:
    """Wait for cells on the socket and run each in this process's one namespace, in turn."""
    where = Path(path or socket_path())
    where.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)  # the socket is the container user's alone
    try:
        server.bind(str(where))
    finally:
        os.umask(old)
    server.listen(4)
    print(f"interactive: waiting for cells on {where}", flush=True)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    while True:
        conn, _ = server.accept()
        with conn:
            stream = Stream(conn)
            try:
                source = receive(conn)
            except (OSError, ValueError) as err:
                stream.write(f"interactive: {err}\n")
                stream.done(False)
                continue
            stream.done(execute(source, namespace, cast(TextIO, stream)))  # a text file, as print wants


def run(source: str, path: str | None = None, out: TextIO = sys.stdout) -> int:
    """Send a cell to this pod's ``serve`` and copy its output to ``out`` as it comes: 0 when the
    cell ran, 1 when it raised, 2 when no ``serve`` listens (the Trainer is not interactive)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path or socket_path())
    except OSError as err:
        out.write(
            f"interactive: nothing listens on {path or socket_path()} ({err}): this pod does not run "
            "`python3 -m trainerop_sdk.interactive serve` (create the Trainer with TrainerClient.interactive)\n"
        )
        return 2
    with conn:
        conn.sendall(source.encode())
        conn.shutdown(socket.SHUT_WR)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        buffer = ""
        while chunk := conn.recv(65536):
            *lines, buffer = (buffer + decoder.decode(chunk)).split("\n")
            for line in lines:
                if line.startswith(DONE):
                    return 0 if line == DONE + "ok" else 1
                out.write(line + "\n")
            out.flush()
        out.write(buffer)  # the rank ended the connection before the cell did (it stopped)
        return 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["serve"]:
        serve()
        return 0
    if args == ["run"]:
        return run(sys.stdin.read())
    print("usage: python3 -m trainerop_sdk.interactive serve|run", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
