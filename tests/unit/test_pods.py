"""Pod and Service manifests: labels, ownership, env, and the contribution merge order."""

import re
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.factories import trainer_fields, trainer_spec
from trainerop_common.api import Contribution, PodContribution
from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.pod_security import BASELINE, PRIVILEGED
from trainerop_common.topology import role_override
from trainerop_trainer.pods import (
    Owner,
    PodSettings,
    merge_contributions,
    pod_manifest,
    restrict_containers,
    role_contributions,
    secret_grants,
    service_manifest,
    wait_for,
)
from trainerop_trainer.topology import Replica

OWNER = Owner("llama", "team-a", "uid-1", 3)
FIELDS = trainer_fields(
    epochs=10,
    image="finetuner:1",
    framework="pytorch",
    command=["python", "train.py"],
    env=[{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "SHARED", "value": "user"}],
    resources={"requests": {"cpu": 20, "memory": "40Gi"}, "limits": {"nvidia.com/gpu": 8}},
    topology={"workers": 2},
    checkpoint={"bucket": "pvc-backups"},
)
SPEC = trainer_spec(**FIELDS)


def spec_with(**changes: Any) -> TrainerSpec:
    """SPEC with ``changes`` added or replaced."""
    return trainer_spec(**{**FIELDS, **changes})


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def contribution(**fields: Any) -> PodContribution:
    return PodContribution.model_validate(fields)


def test_pod_identity_labels_owner_and_restart_policy() -> None:
    pod = pod_manifest(OWNER, SPEC, Replica("worker", 1), {}, PodSettings())
    meta = pod["metadata"]
    assert meta["name"] == "llama-worker-1"
    assert meta["labels"]["trainer-name"] == "llama"
    assert meta["labels"]["trainer.operator.kubeflow.org/replica-type"] == "worker"
    assert meta["labels"]["trainer.operator.kubeflow.org/replica-index"] == "1"
    assert meta["annotations"]["trainer.operator.kubeflow.org/generation"] == "3"
    (ref,) = meta["ownerReferences"]
    assert (ref["kind"], ref["uid"], ref["controller"]) == ("Trainer", "uid-1", True)
    assert pod["spec"]["restartPolicy"] == "Never"
    container = pod["spec"]["containers"][0]
    assert container["name"] == "pytorch"
    assert container["command"] == ["python", "train.py"]
    assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]
    assert container["resources"] == {"requests": {"cpu": 20, "memory": "40Gi"}, "limits": {"nvidia.com/gpu": 8}}


def test_env_has_framework_operator_and_user_variables() -> None:
    env = env_of(pod_manifest(OWNER, SPEC, Replica("worker", 1), {}, PodSettings()))
    assert env["RANK"] == "2"
    assert env["EPOCHS"] == "10"
    assert env["TRAINER_UID"] == "uid-1"
    assert env["NCCL_DEBUG"] == "INFO"


def test_workers_wait_for_the_master_in_an_init_container() -> None:
    worker = pod_manifest(OWNER, SPEC, Replica("worker", 0), {}, PodSettings(init_image="busybox:x"))
    (init,) = worker["spec"]["initContainers"]
    assert init["image"] == "busybox:x"
    script = init["command"][2]
    # busybox's nslookup searches no domain for a dotted name: it asks under the first search
    # domain of the pod's resolv.conf (<namespace>.svc.<cluster domain>)
    resolv = "nameserver 10.0.0.10\nsearch team-a.svc.cluster.local svc.cluster.local cluster.local\n"
    name = re.search(r'domain="\$\((sed .*) /etc/resolv\.conf\)"', script)
    assert name is not None
    assert 'name="llama-master-0.llama${domain:+.$domain}"' in script
    domain = subprocess.run(["sh", "-c", name.group(1)], input=resolv, capture_output=True, text=True, check=True)
    assert domain.stdout == "team-a.svc.cluster.local\n"
    assert "until nslookup \"$name\" | grep -q '^Name:'" in script
    master = pod_manifest(OWNER, SPEC, Replica("master", 0), {}, PodSettings())
    assert "initContainers" not in master["spec"]


def test_contributions_merge_profile_then_quota_then_checkpoint_and_the_spec_wins() -> None:
    contributions = {
        "checkpoint": contribution(
            env=[{"name": "SHARED", "value": "checkpoint"}],
            volumes=[{"name": "ckpt", "persistentVolumeClaim": {"claimName": "pvc-backups"}}],
            volumeMounts=[{"name": "ckpt", "mountPath": "/checkpoints"}],
        ),
        "profile": contribution(
            env=[{"name": "SHARED", "value": "profile"}, {"name": "NCCL_IB_TIMEOUT", "value": "22"}],
            nodeSelector={"gpu-type": "a100", "zone": "a"},
            tolerations=[{"key": "usage", "operator": "Equal", "value": "training", "effect": "NoSchedule"}],
            resources={"limits": {"nvidia.com/gpu": 4, "memory": "10Gi"}},
        ),
        "quota": contribution(
            nodeSelector={"zone": "b"}, tolerations=[{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]
        ),
    }
    pod = pod_manifest(OWNER, SPEC, Replica("worker", 0), contributions, PodSettings())
    env = env_of(pod)
    assert env["SHARED"] == "user"  # the Trainer's own spec wins
    assert env["NCCL_IB_TIMEOUT"] == "22"
    assert pod["spec"]["nodeSelector"] == {"gpu-type": "a100", "zone": "b"}  # quota after profile
    assert [t["key"] for t in pod["spec"]["tolerations"]] == ["usage", "spot"]
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": 8, "memory": "10Gi"}  # spec's gpu wins, profile's memory stays
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "pvc-backups"
    assert pod["spec"]["containers"][0]["volumeMounts"] == [{"name": "ckpt", "mountPath": "/checkpoints"}]


def test_the_verified_digests_replace_the_images_the_trainer_and_its_overrides_name() -> None:
    """The verify concern's ``images``: what was verified is what runs, the role's override too;
    the operator's own init images are not the run's and stay as they are."""
    digest = "sha256:" + "a" * 64
    containers = [{"name": "side", "image": "sidecar:1"}, {"name": "other", "image": "x"}]
    spec = spec_with(podTemplateOverrides={"worker": {"spec": {"containers": containers}}})
    pinned = {
        "finetuner:1": f"docker.io/library/finetuner@{digest}",
        "sidecar:1": f"docker.io/library/sidecar@{digest}",
    }
    pod = pod_manifest(OWNER, spec, Replica("worker", 1), {"verify": contribution(images=pinned)}, PodSettings())
    images = {c["name"]: c["image"] for c in pod["spec"]["containers"]}
    assert images == {"pytorch": pinned["finetuner:1"], "side": pinned["sidecar:1"], "other": "x"}
    assert [c["image"] for c in pod["spec"]["initContainers"]] == [PodSettings().init_image]


def test_an_image_volume_pulls_the_verified_digest_too() -> None:
    digest = "sha256:" + "b" * 64
    volumes = [{"name": "data", "image": {"reference": "dataset:7"}}]
    spec = spec_with(podTemplateOverrides={"worker": {"spec": {"volumes": volumes}}})
    pinned = {"dataset:7": f"docker.io/library/dataset@{digest}"}
    pod = pod_manifest(OWNER, spec, Replica("worker", 0), {"verify": contribution(images=pinned)}, PodSettings())
    (data,) = [v for v in pod["spec"]["volumes"] if v["name"] == "data"]
    assert data["image"]["reference"] == pinned["dataset:7"]
    overrides = spec.pod_template_overrides
    assert overrides is not None
    assert overrides.worker is not None
    untouched = [{"name": "data", "image": {"reference": "dataset:7"}}]
    assert overrides.worker["spec"]["volumes"] == untouched  # the Trainer's own (a cached body's) as written


def test_a_concern_s_fragment_for_a_role_goes_over_its_fragment_for_every_role() -> None:
    """Contribution.roles: Kueue sends the master and the workers to different flavors' nodes."""
    quota = Contribution.model_validate(
        {
            "generation": 3,
            "pod": {"annotations": {"admission": "kueue-1"}, "nodeSelector": {"zone": "a"}},
            "roles": {
                "worker": {"nodeSelector": {"gpu": "h100"}, "labels": {"podset": "worker"}},
                "master": {"nodeSelector": {"zone": "b"}},
            },
        }
    )
    profile = Contribution.model_validate({"generation": 3, "pod": {"nodeSelector": {"gpu": "a100", "pool": "x"}}})
    by_role = {r: role_contributions({"profile": profile, "quota": quota}, r) for r in ("worker", "master", "ps")}
    worker = pod_manifest(OWNER, SPEC, Replica("worker", 0), by_role["worker"], PodSettings())
    master = pod_manifest(OWNER, SPEC, Replica("master", 0), by_role["master"], PodSettings())
    assert worker["spec"]["nodeSelector"] == {"gpu": "h100", "pool": "x", "zone": "a"}
    assert master["spec"]["nodeSelector"] == {"gpu": "a100", "pool": "x", "zone": "b"}
    assert (worker["metadata"]["labels"]["podset"], "podset" in master["metadata"]["labels"]) == ("worker", False)
    assert worker["metadata"]["annotations"]["admission"] == master["metadata"]["annotations"]["admission"]
    assert by_role["ps"]["quota"] == quota.pod  # no fragment of its own: the one for every role


def test_scheduling_gates_add_up_and_the_pods_are_created_with_them() -> None:
    """A gate is removed by whoever asked for it (Kueue's topology ungater), never by the trainer."""
    contributions = {
        "profile": contribution(schedulingGates=["example.com/warm-cache"]),
        "quota": contribution(schedulingGates=["kueue.x-k8s.io/topology", "example.com/warm-cache"]),
    }
    pod = pod_manifest(OWNER, SPEC, Replica("worker", 0), contributions, PodSettings())
    assert pod["spec"]["schedulingGates"] == [{"name": "example.com/warm-cache"}, {"name": "kueue.x-k8s.io/topology"}]
    ungated = pod_manifest(OWNER, SPEC, Replica("worker", 0), {"quota": contribution()}, PodSettings())
    assert "schedulingGates" not in ungated["spec"]


def test_merge_of_nothing_is_empty() -> None:
    assert merge_contributions([]).to_k8s() == {}


def test_role_override_applies_to_that_role_only() -> None:
    spec = spec_with(
        podTemplateOverrides={
            "master": {
                "metadata": {"labels": {"team": "x", "trainer-name": "evil"}},
                "spec": {"priorityClassName": "high", "containers": [{"name": "pytorch", "workingDir": "/w"}]},
            }
        },
    )
    master = pod_manifest(OWNER, spec, Replica("master", 0), {}, PodSettings())
    assert master["spec"]["priorityClassName"] == "high"
    assert master["spec"]["containers"][0]["workingDir"] == "/w"
    assert master["spec"]["containers"][0]["image"] == "finetuner:1"
    assert master["metadata"]["labels"]["team"] == "x"
    assert master["metadata"]["labels"]["trainer-name"] == "llama"  # identity labels cannot be overridden
    worker = pod_manifest(OWNER, spec, Replica("worker", 0), {}, PodSettings())
    assert "priorityClassName" not in worker["spec"]


def test_one_headless_service_per_trainer_gives_each_replica_a_dns_name() -> None:
    svc = service_manifest(OWNER, SPEC)
    assert svc["metadata"]["name"] == "llama"
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True  # the rendezvous resolves before readiness
    assert svc["spec"]["selector"] == {"trainer-name": "llama", "trainer.operator.kubeflow.org/trainer-uid": "uid-1"}
    assert svc["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    pod = pod_manifest(OWNER, SPEC, Replica("worker", 1), {}, PodSettings())
    # <hostname>.<subdomain> resolves in the namespace: Replica.address, what the env names
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("llama-worker-1", "llama")
    assert Replica("worker", 1).address("llama") == "llama-worker-1.llama"
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()  # the pods are its endpoints


def test_a_trainer_of_an_earlier_version_keeps_its_replicas_names() -> None:
    """Started with a Service per replica (earlier versions), its running pods have no hostname
    under the Trainer's Service: a replacement is told the names those Services give."""
    legacy = replace(OWNER, per_replica_services=True)
    worker = pod_manifest(legacy, SPEC, Replica("worker", 0), {}, PodSettings())
    assert env_of(worker)["MASTER_ADDR"] == "llama-master-0"
    assert 'name="llama-master-0${domain:+.$domain}"' in worker["spec"]["initContainers"][0]["command"][2]
    assert env_of(pod_manifest(OWNER, SPEC, Replica("worker", 0), {}, PodSettings()))["MASTER_ADDR"] == (
        "llama-master-0.llama"
    )


def test_per_replica_claim_is_mounted_and_named_after_the_replica() -> None:
    spec = spec_with(storage={"size": "10Gi", "storageClassName": "fast"})
    from trainerop_trainer.pods import claim_manifest

    pod = pod_manifest(OWNER, spec, Replica("worker", 1), {}, PodSettings())
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "replica-data")
    assert volume["persistentVolumeClaim"]["claimName"] == "llama-worker-1-data"
    assert {"name": "replica-data", "mountPath": "/data"} in pod["spec"]["containers"][0]["volumeMounts"]
    claim = claim_manifest(OWNER, spec, Replica("worker", 1))
    assert claim["metadata"]["name"] == "llama-worker-1-data"
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "10Gi"}},
        "storageClassName": "fast",
    }
    assert claim["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


PROFILE = contribution(
    nodeSelector={"gpu-type": "a100"},
    tolerations=[{"key": "usage", "operator": "Equal", "value": "training", "effect": "NoSchedule"}],
    env=[{"name": "NCCL_IB_TIMEOUT", "value": "22"}],
    volumes=[{"name": "profile-runtime-secret", "secret": {"secretName": "vault"}}],
    volumeMounts=[{"name": "profile-runtime-secret", "mountPath": "/etc/secrets", "readOnly": True}],
)


def test_a_role_override_merges_with_what_a_profile_contributed() -> None:
    spec = spec_with(
        podTemplateOverrides={
            "worker": {
                "spec": {
                    "nodeSelector": {"zone": "a", "gpu-type": "h100"},
                    "tolerations": [{"key": "spot", "operator": "Exists"}],
                    "volumes": [{"name": "scratch", "emptyDir": {}}],
                    "containers": [
                        {
                            "name": "pytorch",
                            "env": [{"name": "NCCL_IB_TIMEOUT", "value": "30"}, {"name": "EXTRA", "value": "1"}],
                            "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                            "resources": {"limits": {"memory": "80Gi"}},
                        }
                    ],
                }
            }
        },
    )
    pod = pod_manifest(OWNER, spec, Replica("worker", 0), {"profile": PROFILE}, PodSettings())
    pod_spec = pod["spec"]
    (container,) = pod_spec["containers"]
    # Maps merge key by key and the Trainer wins; lists merge by key; tolerations add up.
    assert pod_spec["nodeSelector"] == {"gpu-type": "h100", "zone": "a"}
    assert pod_spec["tolerations"] == [
        {"key": "usage", "operator": "Equal", "value": "training", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists"},
    ]
    assert [v["name"] for v in pod_spec["volumes"]] == ["profile-runtime-secret", "scratch"]
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/etc/secrets", "/scratch"]
    assert env_of(pod)["NCCL_IB_TIMEOUT"] == "30"
    assert env_of(pod)["EXTRA"] == "1"
    assert env_of(pod)["WORLD_SIZE"] == "3"  # generated variables stay (a master and 2 workers)
    assert container["resources"] == {
        "requests": {"cpu": 20, "memory": "40Gi"},
        "limits": {"nvidia.com/gpu": 8, "memory": "80Gi"},
    }
    assert container["image"] == "finetuner:1"


def test_every_variable_the_trainer_sets_is_known_to_the_other_concerns() -> None:
    """trainerop_common.contracts lists them so the profile controller can report a clash."""
    from trainerop_common.contracts import set_by_operator

    for framework in ("pytorch", "tensorflow", "jax", "xgboost", "generic"):
        for elastic in (None, {"minWorkers": 1, "maxWorkers": 4}):
            spec = spec_with(
                framework=framework,
                topology={"workers": 2, "elastic": elastic} if framework == "pytorch" else {"workers": 2},
            )
            for replica in (Replica("master", 0), Replica("worker", 1)):
                generated = {
                    e["name"]
                    for e in pod_manifest(OWNER, spec, replica, {}, PodSettings())["spec"]["containers"][0]["env"]
                } - {e.name for e in spec.env or ()}
                assert {n for n in generated if not set_by_operator(n)} == set(), (framework, replica)


def test_an_override_entry_replaces_the_contributed_one_whole_and_nulls_count_as_unset() -> None:
    spec = spec_with(
        podTemplateOverrides={
            "worker": {
                "metadata": {"labels": None},
                "spec": {
                    "nodeSelector": None,
                    "volumes": [{"name": "profile-runtime-secret", "emptyDir": {}}, "junk"],
                    "containers": [
                        {
                            "name": "pytorch",
                            "env": [{"name": "NCCL_IB_TIMEOUT", "valueFrom": {"configMapKeyRef": {"name": "c"}}}],
                            "volumeMounts": [{"name": "other", "mountPath": "/etc/secrets"}],
                            "command": None,
                        }
                    ],
                },
            }
        },
    )
    pod = pod_manifest(OWNER, spec, Replica("worker", 0), {"profile": PROFILE}, PodSettings())
    (container,) = pod["spec"]["containers"]
    (timeout,) = [e for e in container["env"] if e["name"] == "NCCL_IB_TIMEOUT"]
    assert timeout == {"name": "NCCL_IB_TIMEOUT", "valueFrom": {"configMapKeyRef": {"name": "c"}}}  # no "value"
    assert pod["spec"]["volumes"] == [{"name": "profile-runtime-secret", "emptyDir": {}}]  # no "secret"
    assert container["volumeMounts"] == [{"name": "other", "mountPath": "/etc/secrets"}]  # not read-only
    assert pod["spec"]["nodeSelector"] == {"gpu-type": "a100"}  # null: the profile's selector stays
    assert container["command"] == ["python", "train.py"]
    assert env_of(pod)["WORLD_SIZE"] == "3"


@pytest.mark.parametrize(
    ("resolv_conf", "asked"),
    [
        (
            "search ns.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.0.0.10\n",
            "t-master-0.t.ns.svc.cluster.local",
        ),
        ("search ns.svc.corp.example svc.corp.example\n", "t-master-0.t.ns.svc.corp.example"),
        ("nameserver 10.0.0.10\n", "t-master-0.t"),  # a dnsConfig without search domains: the name as it is
    ],
)
def test_the_rendezvous_wait_asks_for_the_name_the_pods_resolver_would(
    tmp_path: Path, resolv_conf: str, asked: str
) -> None:
    """The init container's script, run by a real shell with this resolv.conf and an nslookup that
    answers only the name the wait should ask for (as CoreDNS would once the record exists)."""
    (tmp_path / "resolv.conf").write_text(resolv_conf)
    nslookup = tmp_path / "bin" / "nslookup"
    nslookup.parent.mkdir()
    nslookup.write_text(f'#!/bin/sh\n[ "$1" = "{asked}" ] && echo "Name: $1" || echo "** server can\'t find $1"\n')
    nslookup.chmod(0o755)
    script = wait_for("t-master-0.t", PodSettings())["command"][2].replace(
        "/etc/resolv.conf", str(tmp_path / "resolv.conf")
    )
    env = {"PATH": f"{nslookup.parent}:/usr/bin:/bin"}
    done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr
    assert "waiting" not in done.stdout  # the first answer was the one it waits for


RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.mark.parametrize(
    ("profile", "pod_security"),
    [
        # The operator's default: Pod Security "restricted", the image's own (non-root) user.
        (None, {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}),
        # A profile names the user (still restricted).
        (
            {"runAsUser": 1000, "fsGroup": 1000},
            {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}, "runAsUser": 1000, "fsGroup": 1000},
        ),
        # A profile lets a root image run (its pods no longer pass a restricted namespace).
        ({"runAsNonRoot": False}, {"runAsNonRoot": False, "seccompProfile": {"type": "RuntimeDefault"}}),
    ],
)
def test_training_pods_are_restricted_unless_a_profile_relaxes_who_they_run_as(
    profile: dict[str, Any] | None, pod_security: dict[str, Any]
) -> None:
    contributions = {"profile": contribution(securityContext=profile)} if profile else {}
    pod = pod_manifest(OWNER, SPEC, Replica("worker", 1), contributions, PodSettings())
    assert pod["spec"]["securityContext"] == pod_security
    (container,) = pod["spec"]["containers"]
    assert container["securityContext"] == RESTRICTED_CONTAINER
    (wait,) = pod["spec"]["initContainers"]  # busybox would run as root: it gets a user of its own
    assert wait["securityContext"] == {**RESTRICTED_CONTAINER, "runAsUser": 65532, "runAsNonRoot": True}


@pytest.mark.parametrize("level", [BASELINE, PRIVILEGED])
def test_in_a_looser_namespace_training_pods_run_as_their_image_says_and_the_operators_own_stay_restricted(
    level: str,
) -> None:
    """Issue 53: a namespace labelled baseline or privileged gets pods as its tenants' own would be
    (the image's user and capabilities), with the runtime's seccomp profile; the operator's own
    init container keeps its user and restricted context; an override's containers are as written."""
    sidecar = {"name": "proxy", "image": "envoy:1"}
    spec = spec_with(podTemplateOverrides={"worker": {"spec": {"containers": [sidecar]}}})
    pod = pod_manifest(OWNER, spec, Replica("worker", 1), {}, PodSettings(), level)
    assert pod["spec"]["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    trainer, proxy = pod["spec"]["containers"]
    assert "securityContext" not in trainer
    assert proxy == sidecar
    (wait,) = pod["spec"]["initContainers"]
    assert wait["securityContext"] == {**RESTRICTED_CONTAINER, "runAsUser": 65532, "runAsNonRoot": True}


def test_an_overrides_security_context_goes_over_the_restricted_one_key_by_key() -> None:
    """As kubectl's strategic merge does: a user of the override's own, still non-root, still the
    runtime's seccomp profile (before, the override replaced the whole map and dropped both)."""
    spec = spec_with(podTemplateOverrides={"worker": {"spec": {"securityContext": {"runAsUser": 65532}}}})
    pod = pod_manifest(OWNER, spec, Replica("worker", 0), {}, PodSettings())
    assert pod["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsUser": 65532,
    }


def test_an_overrides_containers_are_restricted_unless_they_say_otherwise() -> None:
    """A container or init container an override adds gets no privilege escalation and every
    capability dropped, as the trainer's own do; what it sets itself stays."""
    bind = {"capabilities": {"add": ["NET_BIND_SERVICE"]}, "runAsUser": 1000}
    spec = spec_with(
        podTemplateOverrides={
            "worker": {
                "spec": {
                    "containers": [{"name": "proxy", "image": "envoy:1", "securityContext": bind}],
                    "initContainers": [{"name": "fetch", "image": "busybox:1.36", "restartPolicy": "Always"}],
                }
            }
        },
    )
    pod = pod_manifest(OWNER, spec, Replica("worker", 0), {}, PodSettings())
    containers = {c["name"]: c["securityContext"] for c in pod["spec"]["containers"] + pod["spec"]["initContainers"]}
    assert containers["fetch"] == RESTRICTED_CONTAINER
    assert containers["proxy"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
        "runAsUser": 1000,
    }
    assert "securityContext" not in (role_override(spec, "worker") or {})["spec"]["initContainers"][0]  # untouched


@pytest.mark.parametrize(
    ("gates", "namespace", "bindings"),
    [
        (
            ("profile", "quota", "checkpoint", "audit"),
            "team-a",
            [
                ("trainer-operator-profile-secret-check", "trainer-operator-profile"),
                ("trainer-operator-checkpoint-credentials", "trainer-operator-checkpoint"),
            ],
        ),
        (("quota",), "team-a", []),  # no controller that reads Secrets: nothing bound
        (("profile",), "team-a", [("trainer-operator-profile-secret-check", "trainer-operator-profile")]),
        (("profile", "checkpoint"), "trainer-operator-system", []),  # never beside the operator's CA Secrets
        (("profile", "checkpoint"), "kube-system", []),
    ],
)
def test_the_secret_grants_bind_each_readers_role_to_that_controller_in_the_namespace(
    gates: tuple[str, ...], namespace: str, bindings: list[tuple[str, str]]
) -> None:
    grants = secret_grants(namespace, gates, "trainer-operator-system")
    assert [(g["metadata"]["name"], g["subjects"][0]["name"]) for g in grants] == bindings
    for grant in grants:
        assert grant["metadata"]["namespace"] == namespace
        assert grant["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": grant["metadata"]["name"],
        }
        assert grant["subjects"][0]["namespace"] == "trainer-operator-system"


@pytest.mark.parametrize(
    ("framework", "topology", "replica", "job_role"),
    [
        ("pytorch", {"workers": 2}, Replica("master", 0), "master"),
        ("pytorch", {"workers": 2}, Replica("worker", 0), None),
        ("pytorch", {"workers": 2, "master": 0}, Replica("worker", 0), "master"),  # worker 0 leads
        ("tensorflow", {"workers": 2, "chief": 1}, Replica("chief", 0), "master"),
        ("tensorflow", {"workers": 2, "chief": 1}, Replica("worker", 0), None),
        ("jax", {"workers": 2}, Replica("worker", 1), None),
    ],
)
def test_pods_carry_kubeflows_labels_next_to_ours(
    framework: str, topology: dict[str, int], replica: Replica, job_role: str | None
) -> None:
    spec = trainer_spec(framework=framework, topology=topology)
    labels = pod_manifest(OWNER, spec, replica, {}, PodSettings())["metadata"]["labels"]
    assert labels["training.kubeflow.org/job-name"] == "llama"
    assert labels["training.kubeflow.org/replica-type"] == replica.role
    assert labels["training.kubeflow.org/replica-index"] == str(replica.index)
    assert labels.get("training.kubeflow.org/job-role") == job_role
    assert labels["trainer.operator.kubeflow.org/replica-type"] == replica.role  # ours stay


def test_a_port_of_the_spec_is_the_containers_and_the_services() -> None:
    spec = trainer_spec(framework="pytorch", port=29400)
    container = pod_manifest(OWNER, spec, Replica("master", 0), {}, PodSettings())["spec"]["containers"][0]
    assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": 29400}]
    assert service_manifest(OWNER, spec)["spec"]["ports"] == [
        {"name": "pytorchjob-port", "port": 29400, "targetPort": 29400}
    ]


def test_an_untyped_overrides_entry_that_is_not_an_object_is_left_for_the_api_server_to_refuse() -> None:
    spec: dict[str, Any] = {"containers": [{"name": "a", "securityContext": "root"}], "initContainers": ["junk"]}
    restrict_containers(spec)
    assert spec == {"containers": [{"name": "a", "securityContext": "root"}], "initContainers": ["junk"]}
