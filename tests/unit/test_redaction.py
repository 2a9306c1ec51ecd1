import json
import logging

from trainerop_common.jsonlog import JsonFormatter
from trainerop_common.redaction import MASK, redact, redact_text


def test_env_values_with_secret_names_are_masked() -> None:
    env = [
        {"name": "HF_TOKEN", "value": "hf_abc"},
        {"name": "aws_secret_access_key", "value": "xyz"},
        {"name": "DB_PASSWORD", "value": "pw"},
        {"name": "NCCL_IB_TIMEOUT", "value": "22"},
        {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "vault", "key": "api"}}},
    ]
    out = redact({"spec": {"env": env}})["spec"]["env"]
    assert [e.get("value") for e in out[:4]] == [MASK, MASK, MASK, "22"]
    assert out[4]["valueFrom"] == {"secretKeyRef": {"name": "vault", "key": "api"}}


def test_label_keys_and_secret_names_are_not_secrets() -> None:
    obj = {"tolerations": [{"key": "usage", "value": "training"}], "runtimeConfig": {"secret": "mistral-vault"}}
    assert redact(obj) == obj


def test_assignments_in_text_are_masked() -> None:
    text = "starting with HF_TOKEN=hf_abc and password: hunter2, EPOCHS=10 'api_key': 'k1'"
    out = redact_text(text)
    assert "hf_abc" not in out
    assert "hunter2" not in out
    assert "k1" not in out
    assert "EPOCHS=10" in out


def test_json_logs_never_contain_secret_values() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "env is %s", (["DB_PASSWORD=pw"],), None)
    record.pod = {"env": [{"name": "GITHUB_TOKEN", "value": "ghp_123"}]}
    line = JsonFormatter("trainer").format(record)
    entry = json.loads(line)
    assert "pw" not in entry["message"]
    assert "ghp_123" not in line
    assert entry["controller"] == "trainer"
    assert entry["level"] == "info"
