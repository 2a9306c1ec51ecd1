"""The README's quickstart, command by command as written, on the bare cluster, with the release's
files as hack/release.py makes them. Afterwards nothing of the operator is left: no CRD, no
cluster-wide object, no namespace of its own."""

import re
import shutil
import subprocess
from pathlib import Path

from hack import release
from tests.quickstart.conftest import cluster_wide

README = Path(__file__).resolve().parents[2] / "README.md"


def quickstart_commands(readme: str) -> list[str]:
    """The commands of the README's "Quickstart" section: every line of its sh blocks."""
    section = readme.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def diagnosis(env: dict[str, str]) -> str:
    """What a person would look at next: the pods, the Trainers' status, the controllers' last words."""
    looks = [
        "kubectl get pods -A -o wide",
        "kubectl get trainers -A -o yaml",
        "kubectl get clusterkopfpeerings -o yaml",
        "kubectl logs -n trainer-operator-system deploy/trainer-operator-trainer --tail=40",
    ]
    done = [subprocess.run(["bash", "-c", look], env=env, capture_output=True, text=True) for look in looks]
    return "\n".join(f"$ {look}\n{d.stdout}{d.stderr}" for look, d in zip(looks, done, strict=True))


def test_the_readme_quickstart_installs_runs_a_trainer_and_uninstalls(
    bare_cluster: dict[str, str], release_image: str, version: str, tmp_path: Path
) -> None:
    follow_the_quickstart(bare_cluster, release_image, version, tmp_path)


def follow_the_quickstart(env: dict[str, str], release_image: str, version: str, tmp_path: Path) -> None:
    """The README's quickstart on the cluster ``env`` names, with the release's files in ``tmp_path``."""
    commands = quickstart_commands(README.read_text())
    assert any(release.manifest_name("dev", version) in c for c in commands), f"the README installs {version}"
    (tmp_path / release.manifest_name("dev", version)).write_text(release.render("dev", release_image))
    shutil.copyfile(release.QUICKSTART_TRAINER, tmp_path / "quickstart-trainer.yaml")
    before = cluster_wide(env)
    outputs = []
    for command in commands:
        print(f"$ {command}", flush=True)
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True)
        print(done.stdout + done.stderr, flush=True)
        if done.returncode != 0:
            print(diagnosis(env), flush=True)
        assert done.returncode == 0, f"`{command}` failed: {done.stderr.strip()}"
        outputs.append(done.stdout)
    shown = outputs[commands.index("kubectl get trainers -n quickstart")]
    assert re.search(r"^hello\s.*\bSucceeded\b", shown, re.MULTILINE), shown
    assert cluster_wide(env) == before  # nothing of the operator left
