"""Log forwarding end to end (issue 7): the five controllers' recorded logs, laid out as the kubelet
writes container logs, go through the forwarding path that runs here (testbed/logforward.py executing
deploy/components/log-forwarding/fluent-bit.yaml, its Lua redaction in real Lua) to a SIEM-style
HTTP receiver. Every audit record arrives exactly once and intact, every controller log line
arrives, and a secret that slipped into the logs unmasked arrives masked.

fluent-bit itself does not run here (it is in neither Debian bookworm nor PyPI); see
docs/log-forwarding.md for what is and is not exercised."""

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from testbed import localdev
from testbed.logforward import DEFAULT_CONFIG, Receiver
from tests.factories import trainer_manifest
from tests.harness import REPO, Cluster, dry_run_pod, eventually
from trainerop_common.redaction import redact, redact_text

SYSTEM = "trainer-operator-system"
CRI_TIME = "2026-11-30T01:02:03.123456789Z"
CHUNK = 200  # lines longer than this are written as P(artial) parts, as the kubelet splits long lines


def canonical(record: Any) -> str:
    return json.dumps(record, sort_keys=True)


def recorded_lines() -> dict[str, list[str]]:
    """Each controller's log (stdout and stderr merged) as it is now, complete lines only."""
    lines = {}
    for controller in localdev.CONTROLLERS:
        data = (localdev.state_dir() / "logs" / f"controller-{controller}.log").read_bytes()
        text = data[: data.rfind(b"\n") + 1].decode("utf-8", errors="replace")
        lines[controller] = text.split("\n")[:-1]
    return lines


def as_object(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def is_audit(line: str) -> bool:
    return (as_object(line) or {}).get("kind") == "AuditLog"


def cri_lines(line: str, stream: str) -> str:
    parts = [line[i : i + CHUNK] for i in range(0, len(line), CHUNK)] or [""]
    flags = ["P"] * (len(parts) - 1) + ["F"]
    return "".join(f"{CRI_TIME} {stream} {flag} {part}\n" for flag, part in zip(flags, parts, strict=True))


def expected_record(line: str) -> dict[str, Any]:
    """What the SIEM should get for one printed line: the JSON object, or the raw CRI record for
    anything else, masked as the controllers' own redaction masks it."""
    obj = as_object(line)
    if obj is not None:
        return dict(redact(obj))
    first_flag = "P" if len(line) > CHUNK else "F"  # a joined record keeps its first part's fields
    return {"time": CRI_TIME, "stream": "stderr", "_p": first_flag, "log": redact_text(line)}


def test_recorded_controller_logs_reach_the_siem_intact_with_secrets_masked(
    cluster: Cluster, namespace: str, tmp_path: Path
) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    cluster.apply(trainer_manifest("forwarded", env=[{"name": "API_TOKEN", "value": canary}]), namespace)

    def records_and_their_lines() -> tuple[list[dict[str, Any]], dict[str, list[str]]] | None:
        records = json.loads(cluster.kubectl("get", "auditlogs", "-n", namespace, "-o", "json"))["items"]
        lines = recorded_lines()
        printed = {json.loads(line)["metadata"]["name"] for line in lines["audit"] if is_audit(line)}
        if records and all(r["metadata"]["name"] in printed for r in records):
            return records, lines
        return None

    records, lines = eventually(records_and_their_lines, what="the Trainer's AuditLogs, each printed on stdout")

    # The recorded logs as the kubelet writes them: /var/log/containers/<pod>_<ns>_<container>-<id>.log,
    # the audit records on stdout, everything else on stderr.
    logdir = tmp_path / "containers"
    logdir.mkdir()
    unredacted = [
        json.dumps(
            {
                "time": "2026-11-30T01:02:03.123Z",
                "level": "info",
                "controller": "audit",
                "logger": "test.unredacted",
                "message": f"API_TOKEN={canary}",
                "pod": {"env": [{"name": "API_TOKEN", "value": canary}]},
            }
        ),
        f"printed by a process without the redacting logger: API_TOKEN={canary} and more",
    ]
    for controller, printed in lines.items():
        extra = unredacted if controller == "audit" else []
        pod = f"trainer-operator-{controller}-6c9f7d8b5-{controller[:5]}"
        path = logdir / f"{pod}_{SYSTEM}_controller-{uuid.uuid4().hex * 2}.log"
        path.write_text("".join(cri_lines(line, "stdout" if is_audit(line) else "stderr") for line in printed + extra))
    decoy = logdir / f"trainer-operator-audit-6c9f7d8b5-decoy_{namespace}_controller-{uuid.uuid4().hex * 2}.log"
    decoy.write_text(cri_lines(json.dumps({"kind": "AuditLog", "decoy": canary}), "stdout"))

    all_lines = [line for printed in lines.values() for line in printed] + unredacted
    expected_audit = Counter(canonical(expected_record(line)) for line in all_lines if is_audit(line))
    expected_logs = Counter(canonical(expected_record(line)) for line in all_lines if not is_audit(line))

    with Receiver() as receiver:
        env = {
            **os.environ,
            "SIEM_HOST": "127.0.0.1",
            "SIEM_PORT": str(receiver.port),
            "SIEM_TLS": "off",
            "SIEM_TLS_VERIFY": "on",
            "SIEM_AUDIT_URI": "/siem/audit",
            "SIEM_LOGS_URI": "/siem/logs",
        }
        result = subprocess.run(
            [sys.executable, "-m", "testbed.logforward", "forward", "--path", str(logdir), "--retry-wait", "0.2"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert result.returncode == 0, result.stderr
    assert f"-> {len(all_lines)} record(s)" in result.stderr

    audit = receiver.records("/siem/audit")
    logs = receiver.records("/siem/logs")
    # Every AuditLog of the Trainer, exactly once, as the API server holds it.
    for record in records:
        # By namespace and name: a seal's name (audit-seal-00000001) repeats in every namespace.
        key = (record["metadata"]["namespace"], record["metadata"]["name"])
        arrived = [a for a in audit if (a["metadata"].get("namespace"), a["metadata"]["name"]) == key]
        assert len(arrived) == 1, key
        assert arrived[0]["spec"] == record["spec"]
    # Every audit record line in the logs exactly once, and every other line at the log endpoint.
    assert Counter(canonical(a) for a in audit) == expected_audit
    assert Counter(canonical(entry) for entry in logs) == expected_logs
    assert all(r.headers["Content-Type"] == "application/x-ndjson" for r in receiver.requests)
    # The unredacted lines arrived, masked; the canary is nowhere at the receiver.
    assert {"name": "API_TOKEN", "value": "***"} in [e for entry in logs for e in entry.get("pod", {}).get("env", [])]
    assert any(
        entry.get("log", "").startswith("printed by a process") and "API_TOKEN=***" in entry["log"] for entry in logs
    )
    received = b"".join(r.body for r in receiver.requests)
    assert canary.encode() not in received
    assert canary not in result.stdout + result.stderr


def test_the_log_forwarding_component_builds_and_the_api_server_accepts_it(cluster: Cluster, tmp_path: Path) -> None:
    component = DEFAULT_CONFIG.parent
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "components": [os.path.relpath(component, tmp_path)],
            }
        )
    )
    objects = [o for o in yaml.safe_load_all(cluster.kubectl("kustomize", str(tmp_path))) if o]
    kinds = {o["kind"]: o for o in objects}
    assert set(kinds) == {"Namespace", "ServiceAccount", "ConfigMap", "DaemonSet"}
    # The ConfigMap the DaemonSet mounts holds exactly the files the forwarder executes here.
    config_map = kinds["ConfigMap"]
    assert config_map["data"] == {
        "fluent-bit.yaml": DEFAULT_CONFIG.read_text(),
        "redact.lua": (component / "redact.lua").read_text(),
    }
    volumes = kinds["DaemonSet"]["spec"]["template"]["spec"]["volumes"]
    assert config_map["metadata"]["name"] in [v.get("configMap", {}).get("name") for v in volumes]
    # fluent-bit needs hostPath and root: the component's namespace of its own admits it (its Pod
    # Security level), the operator's restricted namespace would refuse it.
    namespace = kinds["Namespace"]["metadata"]["name"]
    assert namespace == kinds["DaemonSet"]["metadata"]["namespace"] == "trainer-operator-logging"
    # (the namespace and the pod's ServiceAccount for real: a dry run of a pod needs both)
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([kinds["Namespace"], kinds["ServiceAccount"]]))
    try:
        cluster.kubectl("apply", "--server-side", "--dry-run=server", "-k", str(tmp_path))
        pod = kinds["DaemonSet"]["spec"]["template"]["spec"]
        code, output = dry_run_pod(cluster, "pss-log-forwarding", namespace, pod)
        assert code == 0, output
        elsewhere = {k: v for k, v in pod.items() if k != "serviceAccountName"}  # that account lives there only
        code, output = dry_run_pod(cluster, "pss-log-forwarding", "trainer-operator-system", elsewhere)
        assert code != 0
        assert 'violates PodSecurity "restricted:latest"' in output
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")
