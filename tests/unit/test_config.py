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
