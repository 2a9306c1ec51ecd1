"""The data scientists' client and `kubectl trainer` against the real local cluster: a run
submitted from Python and from the terminal, followed with a progress bar driven by real
heartbeats (kwok's pods run nothing: the test beats as the pod, with its own bound token), its
Events, checkpoints and audit trail, suspend/resume/scale/delete, and failures that say what to
fix (issue 21)."""

import io
import os
import shlex
import shutil
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import Cluster, eventually
from tests.integration.test_heartbeats import beat_as
from trainerop_client import TrainerClient, TrainerClientError

SIM = "sim.trainer.operator.kubeflow.org"


def finishing_after(seconds: int) -> dict[str, Any]:
    """Worker pods that kwok (their node) ends with exit code 0 after ``seconds``."""
    return {"podTemplateOverrides": {"worker": {"metadata": {"annotations": {f"{SIM}/succeed-after": f"{seconds}s"}}}}}


def fit(rows: int) -> None:
    print(rows)


class Beats:
    """Heartbeats of a run's worker-0, one epoch a second (what its training code would send)."""

    def __init__(self, cluster: Cluster, namespace: str, trainer: str) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, args=(cluster, namespace, trainer), daemon=True)

    def run(self, cluster: Cluster, namespace: str, trainer: str) -> None:
        pod = f"{trainer}-worker-0"
        eventually(lambda: pod in cluster.names("pods", namespace), what=f"{pod} to exist")
        beat = beat_as(cluster, namespace, pod)
        for epoch in range(1, 11):
            if self.stop.wait(1.0):
                return
            beat.send(epoch=epoch, step=epoch * 10, total_steps=100, metrics={"loss": 1 / epoch})

    def __enter__(self) -> "Beats":
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def test_a_run_from_python_followed_with_a_progress_bar_to_its_result(cluster: Cluster, namespace: str) -> None:
    client = TrainerClient(namespace, kubeconfig=str(cluster.kubeconfig), output=io.StringIO())
    created = client.train(
        "bench:latest", func=fit, func_args={"rows": 3}, workers=2, epochs=10, follow=False, spec=finishing_after(25)
    )
    name = created["metadata"]["name"]
    assert name.startswith("train-")
    container = created["spec"]
    assert container["command"][:2] == ["python3", "-c"]
    assert "def fit(rows: int)" in container["command"][2]
    assert {"name": "TRAINER_FUNCTION_ARGS", "value": '{"rows": 3}'} in container["env"]
    shown = io.StringIO()
    follower = TrainerClient(namespace, kubeconfig=str(cluster.kubeconfig), output=shown)
    with Beats(cluster, namespace, name):
        done = follower.wait(name, timeout=120)
    assert done["status"]["phase"] == "Succeeded"
    assert done["status"]["progress"]["percent"] == 100
    frames = shown.getvalue()
    assert f"{name} " in frames
    assert "100%|" in frames
    assert "ETA " in frames
    assert "loss " in frames

    assert [t["metadata"]["name"] for t in client.list()] == [name]
    assert any(e["reason"] == "CreatedPods" for e in client.events(name))
    assert client.audit(name)[0]["spec"]["action"] == "Created"  # the creation, by the user the kubeconfig names
    assert client.checkpoints(name) == []


def test_suspend_resume_scale_and_delete(cluster: Cluster, namespace: str) -> None:
    client = TrainerClient(namespace, kubeconfig=str(cluster.kubeconfig))
    client.train("bench:latest", name="steady", workers=2, follow=False)
    eventually(lambda: client.get("steady").get("status", {}).get("phase") == "Running", what="the run to start")
    client.suspend("steady")
    eventually(lambda: client.get("steady")["status"]["phase"] == "Suspended", what="the run to be suspended")
    assert client.get("steady")["status"]["reason"] == "SuspendedByUser"
    client.resume("steady")
    client.scale("steady", 3)
    eventually(lambda: client.get("steady")["status"].get("topology", {}).get("workers") == 3, what="3 workers")
    client.delete("steady")
    eventually(lambda: "steady" not in cluster.names("trainers", namespace), what="the Trainer to go")


def test_failures_say_what_to_fix(cluster: Cluster, namespace: str) -> None:
    client = TrainerClient(namespace, kubeconfig=str(cluster.kubeconfig))
    with pytest.raises(TrainerClientError, match=r"the API server refused it: .*spec.epochs"):
        client.train("img", name="bad", epochs=0, follow=False)
    with pytest.raises(TrainerClientError, match=rf'"missing" not found in namespace {namespace}'):
        client.get("missing")
    # The profile controller's account may not create Trainers.
    profile = TrainerClient(namespace, kubeconfig=str(cluster.sa_kubeconfigs["profile"]))
    with pytest.raises(TrainerClientError, match=r"forbidden: .*ask your platform team for the edit role"):
        profile.train("img", name="nope", follow=False)
    with pytest.raises(TrainerClientError, match=r"no cluster to talk to .*set KUBECONFIG"):
        TrainerClient(namespace, kubeconfig="/nonexistent/kubeconfig")
    unreachable = yaml.safe_load(cluster.kubeconfig.read_text())
    unreachable["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    path = Path(f"/tmp/unreachable-{uuid.uuid4().hex}.kubeconfig")
    path.write_text(yaml.safe_dump(unreachable))
    try:
        nowhere = TrainerClient(namespace, kubeconfig=str(path))
        with pytest.raises(TrainerClientError, match=r"cannot reach the cluster at https://127.0.0.1:1"):
            nowhere.list()
    finally:
        path.unlink()


@pytest.fixture
def plugin_env(cluster: Cluster) -> dict[str, str]:
    """kubectl finds `kubectl-trainer` on PATH (the client's console script) and the cluster in KUBECONFIG."""
    scripts = Path(sys.executable).parent
    assert (scripts / "kubectl-trainer").exists(), "install libs/client (hack/dev-env.sh or tox) for the plugin"
    path = f"{scripts}:{cluster.kubectl_bin.parent}:{os.environ['PATH']}"
    return {**os.environ, "PATH": path, "KUBECONFIG": str(cluster.kubeconfig)}


def plugin(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kubectl", "trainer", *args], env=env, capture_output=True, text=True, timeout=120)


def test_the_kubectl_plugin_in_a_terminal(
    cluster: Cluster, namespace: str, plugin_env: dict[str, str], tmp_path: Path
) -> None:
    """`kubectl trainer submit` followed in tmux, as a person sees it: the bar moves, the ETA is
    there, the exit code is the run's result; then get, describe, audit."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is needed to check the terminal experience: apt-get install tmux")
    manifest = {
        "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
        "kind": "Trainer",
        "metadata": {"name": "shown"},
        "spec": {"epochs": 10, "image": "bench:latest", "topology": {"workers": 1}, **finishing_after(20)},
    }
    (tmp_path / "shown.yaml").write_text(yaml.safe_dump(manifest))
    session = f"trainer-{uuid.uuid4().hex[:6]}"
    # The environment is given in the command: a login shell of tmux's may set PATH anew.
    assignments = " ".join(f"{k}={shlex.quote(plugin_env[k])}" for k in ("PATH", "KUBECONFIG"))
    submit = f"kubectl trainer submit -n {namespace} -f {tmp_path / 'shown.yaml'}"
    command = f"env {assignments} {submit}; echo EXIT=$?; sleep 60"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "200", "-y", "10", command], check=True)
    try:

        def pane() -> str:
            return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout

        seen: list[str] = []
        with Beats(cluster, namespace, "shown"):

            def moving() -> bool:
                seen.append(pane())
                return any("ETA " in s and "%|" in s and "step " in s and "/100" in s for s in seen)

            try:
                eventually(moving, timeout=90, what="a progress bar with the time left in the terminal")
            except AssertionError as err:
                raise AssertionError(f"{err}; the pane:\n{pane()}") from None

            def ended() -> str | None:
                now = pane()
                return now if "EXIT=" in now else None

            final = eventually(ended, timeout=120, what="the submit to end")
        assert "EXIT=0" in final
        assert "shown: Succeeded" in final
        assert "100%|" in final
        percents = {int(s.split("%|")[0].split()[-1]) for s in seen if "%|" in s}
        assert len(percents) >= 2, seen  # the bar moved while it ran
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)

    got = plugin(plugin_env, "get", "-n", namespace)
    assert got.returncode == 0
    assert "shown" in got.stdout
    assert "Succeeded" in got.stdout
    assert "100%" in got.stdout
    described = plugin(plugin_env, "describe", "shown", "-n", namespace)
    assert "├─ trainer" in described.stdout
    assert "Succeeded=True Succeeded" in described.stdout
    assert "QuotaAdmitted=True" in described.stdout  # the quota controller's part, under its own name
    audited = plugin(plugin_env, "audit", "shown", "-n", namespace)
    assert "Created" in audited.stdout
    missing = plugin(plugin_env, "get", "nothing-here", "-n", namespace)
    assert missing.returncode == 1
    assert "error:" in missing.stderr
    assert "not found" in missing.stderr
