"""The PVC checkpoint verifier (trainerop_checkpoint.pvc): the pod it runs in, what it checks on the
mounted claim, and how its one-letter verdicts come back to the controller."""

import hashlib
import json
from pathlib import Path

import pytest

from trainerop_checkpoint import pvc
from trainerop_checkpoint.decide import Copy
from trainerop_sdk.layout import checkpoint_path, copy_key
from trainerop_sdk.storage import LocalLocation


def copies_on_disk(root: Path, data: dict[int, bytes], replicas: int = 3) -> list[Copy]:
    """Shards written as the SDK writes them (replicas copies each), described as the controller sees them."""
    path = checkpoint_path(str(root / "llama"), 300)
    location = LocalLocation(path)
    out = []
    for shard, blob in data.items():
        for r in range(replicas):
            location.put(copy_key(shard, r), blob)
            out.append(
                Copy("llama-step-300", "uid-1", path, copy_key(shard, r), hashlib.sha256(blob).hexdigest(), len(blob))
            )
    return out


def test_the_pod_mounts_the_claim_read_only_without_a_token_or_privileges() -> None:
    copies = [Copy("llama-step-300", "uid-1", "/checkpoints/llama/step-0000000300", "shard-00000/copy-0", "ab", 2)]
    pod = pvc.verifier_pod("team", "llama", "llama-step-300", "uid-1", "pvc-backups", copies, "trainer-operator:dev")
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] > 0
    assert spec["volumes"] == [
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "pvc-backups", "readOnly": True}}
    ]
    (container,) = spec["containers"]
    assert container["volumeMounts"][0] == {"name": "checkpoints", "mountPath": "/checkpoints", "readOnly": True}
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("Checkpoint", "uid-1")  # goes with its Checkpoint
    (env,) = container["env"]
    assert json.loads(env["value"]) == [["/checkpoints/llama/step-0000000300", "shard-00000/copy-0", "ab", 2]]
    assert len(pod["metadata"]["name"]) <= 63
    other = pvc.verifier_pod("team", "llama", "llama-step-300", "uid-1", "pvc-backups", copies, "img", batch=1)
    assert other["metadata"]["name"] != pod["metadata"]["name"]


def test_the_verifier_finds_good_missing_and_corrupted_copies(tmp_path: Path) -> None:
    copies = copies_on_disk(tmp_path, {0: b"weights of shard 0", 1: b"weights of shard 1"})
    (Path(copies[1].path) / copies[1].key).write_bytes(b"bit rot")  # shard 0, copy 1
    (Path(copies[5].path) / copies[5].key).unlink()  # shard 1, copy 2
    letters = pvc.check(pvc.encode_request(copies))
    assert letters == "oxooom"
    verdicts = pvc.decode_verdicts(copies, letters)
    assert [verdicts[(c.uid, c.key, c.sha256)] for c in copies] == ["ok", "mismatch", "ok", "ok", "ok", "missing"]


def test_a_copy_with_the_right_hash_but_another_size_is_a_mismatch(tmp_path: Path) -> None:
    (copy,) = copies_on_disk(tmp_path, {0: b"x"}, replicas=1)
    wrong = Copy(copy.checkpoint, copy.uid, copy.path, copy.key, copy.sha256, copy.size + 1)
    assert pvc.check(pvc.encode_request([wrong])) == "x"


@pytest.mark.parametrize("message", [None, "", "oo", "oooo", "ooz", "o o"])
def test_a_message_that_does_not_answer_the_request_gives_no_verdict(message: str | None) -> None:
    copies = [Copy("c", "u", "/checkpoints/t/step-0000000001", f"shard-00000/copy-{r}", "s", 1) for r in range(3)]
    assert pvc.decode_verdicts(copies, message) == {}
    assert pvc.decode_verdicts(copies, "oum\n") == {
        ("u", "shard-00000/copy-0", "s"): "ok",
        ("u", "shard-00000/copy-1", "s"): "unreadable",
        ("u", "shard-00000/copy-2", "s"): "missing",
    }


def test_large_checkpoints_are_split_so_each_answer_fits_a_termination_message() -> None:
    copies = [
        Copy("c", "u", "/checkpoints/t/step-0000000001", f"shard-{i:05d}/copy-0", "s" * 64, 1) for i in range(1201)
    ]
    sizes = [len(b) for b in pvc.batches(copies)]
    assert sizes == [500, 500, 201]
    assert pvc.BATCH <= 4096  # one letter per copy; the kubelet keeps 4096 bytes


def test_main_writes_the_verdicts_to_the_termination_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copies = copies_on_disk(tmp_path, {0: b"w"}, replicas=2)
    log = tmp_path / "termination-log"
    monkeypatch.setenv("TRAINEROP_TERMINATION_LOG", str(log))
    monkeypatch.setenv(pvc.REQUEST_ENV, pvc.encode_request(copies))
    assert pvc.main([]) == 0
    assert log.read_text() == "oo"
    monkeypatch.delenv(pvc.REQUEST_ENV)
    assert pvc.main([]) == 2
