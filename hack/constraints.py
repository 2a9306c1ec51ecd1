#!/usr/bin/env python3
"""constraints.txt: every third-party distribution at the version the tests ran with.

The packages' pyproject.toml files say what they work with (ranges); constraints.txt says what was
tested: tox installs the test environment with it, deploy/Dockerfile installs the controllers'
image with it, and a release carries it (`pip install -c constraints.txt ...`). A unit test
(tests/unit/test_constraints.py) fails when the environment the tests run in holds a version the
file does not name, so the file cannot drift from what CI tested.

    .tox/ci/bin/python hack/constraints.py update   # after changing a dependency: pin what is installed
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONSTRAINTS = REPO / "constraints.txt"
INSTALLERS = frozenset({"pip", "setuptools", "wheel"})  # the tools of an install, not what it installs
HEADER = """\
# Every third-party distribution at the version CI tested (hack/constraints.py writes this file;
# tests/unit/test_constraints.py holds it to the tested environment). tox and deploy/Dockerfile
# install with it; so can you: pip install -c constraints.txt --find-links wheels trainerop-client
"""


def canonical(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed() -> dict[str, str]:
    """The running interpreter's third-party distributions, version by canonical name (this
    repository's own packages, trainerop-* and the workspace, are not third-party; nor are pip's
    installers)."""
    found = {canonical(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}
    ours = {name for name in found if name.startswith(("trainerop-", "trainer-operator-"))}  # the workspace too
    return {name: version for name, version in found.items() if name not in ours | INSTALLERS}


def render(pins: dict[str, str]) -> str:
    return HEADER + "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))


def parse(text: str) -> dict[str, str]:
    """name==version lines, by canonical name; comments and blank lines skipped."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            if not sep or not version.strip():
                raise ValueError(f"constraints.txt: {line!r} is not name==version")
            pins[canonical(name.strip())] = version.strip()
    return pins


def drift(pins: dict[str, str], have: dict[str, str]) -> list[str]:
    """What ``have`` (an environment) holds that ``pins`` does not say, one line each."""
    lines = []
    for name, version in sorted(have.items()):
        if name not in pins:
            lines.append(f"{name}=={version} is installed and not pinned")
        elif pins[name] != version:
            lines.append(f"{name}=={version} is installed, constraints.txt pins {pins[name]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["update"]:
        print(__doc__, file=sys.stderr)
        return 2
    pins = installed()
    CONSTRAINTS.write_text(render(pins))
    print(f"wrote {len(pins)} pins from {sys.prefix} to {CONSTRAINTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
