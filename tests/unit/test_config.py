import pytest

from trainerop_common.config import env_gates, parse_args


def test_components_announce_gates_through_their_own_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINEROP_GATE_PROFILE", "true")
    monkeypatch.setenv("TRAINEROP_GATE_AUDIT", "true")
    config = parse_args("trainer", [])
    assert config.gates == ("audit", "profile")
    assert config.gate_conditions == ("ProfileResolved",)  # audit never gates


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINEROP_QPS", "5")
    config = parse_args("quota", ["--qps", "7", "--namespace", "a", "--namespace", "b"])
    assert config.qps == 7
    assert config.namespaces == ("a", "b")


def test_unknown_gate_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args("trainer", ["--gates", "profile,billing"])
    assert "unknown gate(s) ['billing']" in capsys.readouterr().err


def test_env_gates_combines_named_and_listed() -> None:
    assert env_gates({"TRAINEROP_GATE_QUOTA": "true", "TRAINEROP_GATES": "checkpoint"}) == "quota,checkpoint"


def test_the_controllers_that_own_a_concern_serve_webhooks_with_a_choice_of_tls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRAINEROP_WEBHOOK_TLS", "self-signed")
    monkeypatch.setenv("TRAINEROP_WEBHOOK_PORT", "9443")
    profile = parse_args("profile", [])
    assert (profile.webhook_port, profile.webhook_tls) == (9443, "self-signed")
    assert profile.webhook_service == "trainer-operator-profile-webhook"
    assert parse_args("quota", ["--webhook-service", "mine"]).webhook_service == "mine"
    trainer = parse_args("trainer", ["--no-admission-node-fit"])
    assert not trainer.admission_node_fit
    assert parse_args("trainer", []).admission_node_fit
    with pytest.raises(SystemExit):
        parse_args("checkpoint", ["--webhook-port", "9443"])  # the checkpoint controller serves none
    with pytest.raises(SystemExit):
        parse_args("profile", ["--webhook-tls", "plain"])


def test_retention_and_notifications_are_the_audit_controllers_flags() -> None:
    audit = parse_args("audit", ["--retention-records", "3", "--notify-url-file", "/u", "--notify-events", "Failed"])
    assert (audit.retention_records, audit.notify_url_file, audit.notify_events) == (3, "/u", ("Failed",))
    with pytest.raises(SystemExit):
        parse_args("trainer", ["--retention-records", "3"])
    with pytest.raises(SystemExit):
        parse_args("audit", ["--notify-events", "Exploded"])


def test_choices_from_the_environment_are_judged_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINEROP_WEBHOOK_TLS", "plaintext")
    with pytest.raises(SystemExit):
        parse_args("quota", [])
    monkeypatch.delenv("TRAINEROP_WEBHOOK_TLS")
    monkeypatch.setenv("TRAINEROP_NOTIFY_FORMAT", "discord")
    with pytest.raises(SystemExit):
        parse_args("audit", [])
