"""Flags, with TRAINEROP_* variables as defaults: the runtime's, the webhooks' (for the controllers
that serve them) and each controller's own."""

from typing import Any

import pytest

from tests.factories import trainer_spec
from trainerop_audit.config import AuditConfig
from trainerop_checkpoint.config import CheckpointConfig
from trainerop_common.config import parse_args
from trainerop_profile.config import ProfileConfig
from trainerop_quota.config import QuotaConfig
from trainerop_trainer.config import TrainerConfig, env_gates


def test_components_announce_gates_through_their_own_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINEROP_GATE_PROFILE", "true")
    monkeypatch.setenv("TRAINEROP_GATE_AUDIT", "true")
    _, trainer = parse_args("trainer", TrainerConfig, [], webhooks=True)
    assert trainer.gates == ("audit", "profile")
    assert trainer.gates_for(trainer_spec(profile="p")) == ("ProfileResolved",)  # audit never gates


# Which deployed gates a Trainer waits for: only concerns its spec gives something to decide.
CHECKPOINT = {"bucket": "s3://b/p", "credentialsSecret": "creds"}
GATES_TABLE: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    # the Trainer's spec beyond the minimum -> the conditions it waits for
    # (quota and verify always: a namespace's QuotaPolicy or ImagePolicy governs whatever the spec says)
    ("neither a profile nor checkpointing", {}, ("QuotaAdmitted", "ImagesVerified")),
    ("a profile", {"profile": "p"}, ("ProfileResolved", "QuotaAdmitted", "ImagesVerified")),
    ("checkpointing", {"checkpoint": CHECKPOINT}, ("QuotaAdmitted", "CheckpointReady", "ImagesVerified")),
    (
        "both",
        {"profile": "p", "checkpoint": CHECKPOINT},
        ("ProfileResolved", "QuotaAdmitted", "CheckpointReady", "ImagesVerified"),
    ),
]


@pytest.mark.parametrize(("extra", "waits_for"), [r[1:] for r in GATES_TABLE], ids=[r[0] for r in GATES_TABLE])
def test_a_trainer_waits_only_for_the_gates_its_spec_asks(extra: dict[str, Any], waits_for: tuple[str, ...]) -> None:
    _, trainer = parse_args("trainer", TrainerConfig, ["--gates", "profile,quota,checkpoint,audit,verify"])
    assert set(trainer.gates_for(trainer_spec(epochs=1, image="i", topology={"workers": 1}, **extra))) == set(waits_for)


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINEROP_QPS", "5")
    monkeypatch.setenv("TRAINEROP_NODE_LOST_SECONDS", "90")
    config, quota = parse_args("quota", QuotaConfig, ["--qps", "7", "--namespace", "a", "--namespace", "b"])
    assert config.qps == 7
    assert config.namespaces == ("a", "b")
    assert quota.node_lost_seconds == 90


def test_topology_levels_keep_their_order_finest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    _, quota = parse_args("quota", QuotaConfig, [])
    assert quota.topology_levels == ("nvidia.com/gpu.clique", "topology.kubernetes.io/zone")
    monkeypatch.setenv("TRAINEROP_TOPOLOGY_LEVELS", "rack, zone,rack")
    assert parse_args("quota", QuotaConfig, [])[1].topology_levels == ("rack", "zone")
    assert parse_args("quota", QuotaConfig, ["--topology-levels", "z,a"])[1].topology_levels == ("z", "a")


def test_namespaces_come_from_one_variable_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINEROP_NAMESPACES", "b, a")
    config, _ = parse_args("profile", ProfileConfig, [])
    assert config.namespaces == ("a", "b")


def test_unknown_gate_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args("trainer", TrainerConfig, ["--gates", "profile,billing"])
    assert "unknown gate(s) ['billing']" in capsys.readouterr().err


def test_env_gates_combines_named_and_listed() -> None:
    assert env_gates({"TRAINEROP_GATE_QUOTA": "true", "TRAINEROP_GATES": "checkpoint"}) == "quota,checkpoint"


def test_the_controllers_that_own_a_concern_serve_webhooks_with_a_choice_of_tls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRAINEROP_WEBHOOK_TLS", "self-signed")
    monkeypatch.setenv("TRAINEROP_WEBHOOK_PORT", "9443")
    profile, _ = parse_args("profile", ProfileConfig, [], webhooks=True)
    assert (profile.webhook.webhook_port, profile.webhook.webhook_tls) == (9443, "self-signed")
    quota, _ = parse_args("quota", QuotaConfig, ["--webhook-service", "mine"], webhooks=True)
    assert quota.webhook.webhook_service == "mine"
    assert not parse_args("trainer", TrainerConfig, ["--no-admission-node-fit"], webhooks=True)[1].admission_node_fit
    assert parse_args("trainer", TrainerConfig, [], webhooks=True)[1].admission_node_fit
    with pytest.raises(SystemExit):
        parse_args("checkpoint", CheckpointConfig, ["--webhook-port", "9443"])  # the checkpoint controller serves none
    with pytest.raises(SystemExit):
        parse_args("profile", ProfileConfig, ["--webhook-tls", "plain"], webhooks=True)


def test_each_controller_has_only_its_own_flags() -> None:
    _, audit = parse_args(
        "audit", AuditConfig, ["--retention-records", "3", "--notify-url-file", "/u", "--notify-events", "Failed"]
    )
    assert (audit.retention_records, audit.notify_url_file, audit.notify_events) == (3, "/u", ("Failed",))
    with pytest.raises(SystemExit):
        parse_args("trainer", TrainerConfig, ["--retention-records", "3"])
    with pytest.raises(SystemExit):
        parse_args("profile", ProfileConfig, ["--storage-pod-image", "x"])


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--notify-events", "Exploded"], "unknown --notify-events ['Exploded']"),
        (["--retention-days", "-1"], "--retention-days and --retention-records must be 0"),
        (["--retention-interval-seconds", "0"], "--retention-interval-seconds must be more than 0"),
        (["--notify-restart-storm-failures", "0"], "--notify-restart-storm-failures must be at least 1"),
        (["--trace-sample-ratio", "2"], "--trace-sample-ratio must be between 0 and 1"),
        (["--qps", "0"], "--qps must be > 0"),
    ],
)
def test_bad_values_are_refused_saying_what_to_fix(
    flags: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args("audit", AuditConfig, flags, webhooks=True)
    assert problem in capsys.readouterr().err


def test_choices_from_the_environment_are_judged_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINEROP_WEBHOOK_TLS", "plaintext")
    with pytest.raises(SystemExit):
        parse_args("quota", QuotaConfig, [], webhooks=True)
    monkeypatch.delenv("TRAINEROP_WEBHOOK_TLS")
    monkeypatch.setenv("TRAINEROP_NOTIFY_FORMAT", "discord")
    with pytest.raises(SystemExit):
        parse_args("audit", AuditConfig, [], webhooks=True)


def test_a_log_level_and_an_empty_event_list_mean_what_they_meant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINEROP_LOG_LEVEL", "debug")
    monkeypatch.setenv("TRAINEROP_NOTIFY_EVENTS", "")
    config, audit = parse_args("audit", AuditConfig, [], webhooks=True)
    assert config.log_level == "DEBUG"
    assert audit.notify_events == ("Failed", "RestartStorm", "Stalled", "Succeeded")
    assert parse_args("audit", AuditConfig, ["--log-level", "warning"])[0].log_level == "WARNING"
