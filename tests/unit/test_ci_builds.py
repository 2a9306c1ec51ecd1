"""CI's machinery: builds shared by concurrent processes (cluster.build_lock), the background
preparation's steps (testbed/prepare.py), each test worker's own cluster (cluster.WORKER) and the
durations CI prints (hack/command_durations.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from testbed import cluster, images, prepare
from tests.harness import eventually

REPO = Path(__file__).resolve().parents[2]


def _durations_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("command_durations", REPO / "hack" / "command_durations.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_second_builder_waits_for_the_first_and_then_finds_its_build(tmp_path: Path) -> None:
    target = tmp_path / "tool" / "binary"
    waiter = textwrap.dedent(
        f"""
        from pathlib import Path
        from testbed import cluster
        target = Path({str(target)!r})
        with cluster.build_lock(target):
            Path({str(tmp_path / "found")!r}).write_text("yes" if target.exists() else "no")
        """
    )
    with cluster.build_lock(target):
        second = subprocess.Popen([sys.executable, "-c", waiter], cwd=REPO, stdout=subprocess.PIPE, text=True)
        eventually(lambda: "waiting for another process" in (second.stdout.readline() if second.stdout else ""))
        assert not (tmp_path / "found").exists()  # still waiting while the first builds
        target.write_text("built")
    assert second.wait(timeout=30) == 0
    assert (tmp_path / "found").read_text() == "yes"


def test_a_build_in_the_cache_is_not_made_again(tmp_path: Path) -> None:
    target = tmp_path / "tool" / "binary"
    builds: list[Path] = []

    def build() -> None:
        builds.append(target)
        target.write_text("built")

    assert cluster.built_once(target, build) == target
    assert cluster.built_once(target, build) == target
    assert builds == [target]


def test_every_image_and_every_cluster_binary_is_prepared_once() -> None:
    names = [step.name for step in prepare.STEPS]
    assert len(names) == len(set(names))
    assert {f"image {name}" for name in images.IMAGES} <= set(names)
    assert names[0] == "kubernetes"  # every cluster needs it first


@pytest.mark.parametrize(
    ("worker", "port_base", "run_dir", "registry_storage"),
    [
        (None, 16440, "cluster", "registry"),
        ("gw0", 16440, "cluster", "registry"),
        ("gw1", 16540, "cluster-gw1", "cluster-gw1/registry-storage"),
        ("gw2", 16640, "cluster-gw2", "cluster-gw2/registry-storage"),
    ],
)
def test_each_test_worker_has_a_cluster_of_its_own(
    tmp_path: Path, worker: str | None, port_base: int, run_dir: str, registry_storage: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINER_OPERATOR_", "PYTEST_XDIST"))}
    env["TRAINER_OPERATOR_CACHE"] = str(tmp_path)
    if worker:
        env["PYTEST_XDIST_WORKER"] = worker
    code = "from testbed import cluster, registry; print(cluster.PORT_BASE, cluster.RUN_DIR, registry.STORAGE)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(port_base), str(tmp_path / run_dir), str(tmp_path / registry_storage)]


def test_ci_says_how_long_each_tox_command_took() -> None:
    durations = _durations_module()
    lines = [
        "ci: install_deps> python -I -m pip install ...\n",
        "ci: commands[0]> ruff check .\n",
        "All checks passed!\n",
        "ci: commands[1]> pytest tests/unit -p no:cacheprovider\n",
        "1536 passed\n",
        "  ci: OK (99.00 seconds)\n",
    ]
    clock = iter([10.0, 12.5, 100.0, 101.5])
    out = list(durations.durations(lines, clock))
    assert [item for item in out if isinstance(item, str)] == lines  # everything passes through
    assert [item for item in out if not isinstance(item, str)] == [
        ("ci: installing the environment", 2.5),
        ("ci: ruff check .", 87.5),
        ("ci: pytest tests/unit -p no:cacheprovider", 1.5),
    ]
    table = durations.table([("ci: ruff check .", 2.5), ("ci: pytest tests/unit", 87.5)])
    assert table.splitlines()[1:] == [
        "       2.5 s  ci: ruff check .",
        "      87.5 s  ci: pytest tests/unit",
        "      90.0 s  in all",
    ]
