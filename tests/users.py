"""Another user of the machine, as another tenant's pod is to a shared volume: a function run in a
forked child switched to that user (the tests run as root to switch)."""

import os
from collections.abc import Callable


def as_user(uid: int, gid: int, run: Callable[[], object]) -> str:
    """``run()`` in a child switched to ``uid`` with ``gid`` as its only group: what it returned,
    or the name (and ``reason``, when it has one) of what it raised."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child)
        os.close(read)
        try:
            os.setgroups([gid])
            os.setgid(gid)
            os.setuid(uid)
            try:
                answer = str(run())
            except Exception as err:
                answer = f"{type(err).__name__}: {getattr(err, 'reason', '')}{err}"
            os.write(write, answer.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        out = pipe.read()
    os.waitpid(child, 0)
    return out
