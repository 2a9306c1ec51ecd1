"""The fluent-bit configuration of deploy/components/log-forwarding and testbed/logforward.py, the
forwarder that executes it here: config checks, the Lua redaction in real Lua against the
Python redaction it backs up, CRI parsing, routing, and delivery to a real HTTP receiver."""

import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed import logforward
from testbed.logforward import DEFAULT_CONFIG, ForwardError, LuaFilter, Pipeline, Receiver, load_config
from trainerop_common.redaction import redact, redact_text

COMPONENT = DEFAULT_CONFIG.parent
POD_LOG = "trainer-operator-{c}-5d8f7c9b6d-x2x4z_trainer-operator-system_controller-" + "a" * 64 + ".log"
T0 = "2026-11-30T01:02:03.123456789Z"
AUDIT = {
    "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
    "kind": "AuditLog",
    "metadata": {"name": "trainer-abc-created", "namespace": "team-a"},
    "spec": {"verb": "create", "objectRef": {"name": "abc"}, "annotations": {}, "stages": []},
}
LOG = {"time": "2026-11-30T01:02:03.123Z", "level": "info", "controller": "audit", "message": "reconciled"}


def siem_env(port: int) -> dict[str, str]:
    return {
        "SIEM_HOST": "127.0.0.1",
        "SIEM_PORT": str(port),
        "SIEM_TLS": "off",
        "SIEM_TLS_VERIFY": "on",
        "SIEM_AUDIT_URI": "/audit",
        "SIEM_LOGS_URI": "/logs",
    }


def cri(text: str, stream: str = "stderr", partial: bool = False, time: str = T0) -> str:
    return f"{time} {stream} {'P' if partial else 'F'} {text}\n"


def write_log(directory: Path, lines: list[str], controller: str = "audit") -> Path:
    path = directory / POD_LOG.format(c=controller)
    path.write_text("".join(lines))
    return path


def run(directory: Path, receiver: Receiver, overrides: tuple[str, ...] = ()) -> Pipeline:
    pipeline = Pipeline(load_config(DEFAULT_CONFIG, siem_env(receiver.port), overrides), str(directory))
    logforward.forward(pipeline, follow=False, retry_wait=0, log=io.StringIO(), stop=threading.Event())
    return pipeline


@pytest.fixture
def lua() -> LuaFilter:
    return LuaFilter({"script": "redact.lua", "call": "redact_record"}, "filter redact", COMPONENT)


def lua_redact(lua: LuaFilter, record: dict[str, Any]) -> dict[str, Any]:
    kept, emitted = lua.apply("kube.test", 1.5, record)
    assert emitted == []
    assert len(kept) == 1
    assert kept[0][0] == 1.5  # the timestamp is kept (code 0 or 2)
    return kept[0][1]


# --- the configuration ------------------------------------------------------------------------


def test_the_shipped_config_parses_and_uses_only_what_the_forwarder_runs() -> None:
    config = load_config(DEFAULT_CONFIG, siem_env(8080))
    pipeline = Pipeline(config)
    assert [e["name"] for e in config.inputs] == ["tail"]
    assert [e["name"] for e in config.filters] == ["parser", "lua", "rewrite_tag"]
    assert [(e["alias"], e["match"]) for e in config.outputs] == [("siem-audit", "audit.*"), ("siem-logs", "kube.*")]
    assert [o.url for o in pipeline.outputs] == ["http://127.0.0.1:8080/audit", "http://127.0.0.1:8080/logs"]
    assert config.inputs[0]["path"] == "/var/log/containers/trainer-operator-*_trainer-operator-system_controller-*.log"


def test_the_component_mounts_the_config_and_sets_every_variable_it_reads() -> None:
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kustomization["kind"] == "Component"
    generated = kustomization["configMapGenerator"][0]
    assert set(generated["files"]) == {"fluent-bit.yaml", "redact.lua"}
    daemonset = yaml.safe_load((COMPONENT / "daemonset.yaml").read_text())
    pod = daemonset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    assert container["args"] == [f"--config={mount['mountPath']}/fluent-bit.yaml"]
    config_volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert config_volume["configMap"]["name"] == generated["name"]
    assert next(m for m in container["volumeMounts"] if m["name"] == "varlog")["readOnly"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    variables = set(logforward._VAR.findall(json.dumps(yaml.load(DEFAULT_CONFIG.read_text(), Loader=yaml.BaseLoader))))
    assert variables == {e["name"] for e in container["env"]}


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ("      alias: redact\n", "      alias: redact\n      time_as_table: on\n", "time_as_table"),
        ("    - name: lua\n", "    - name: wasm\n", "wasm"),
        ("multiline.parser: cri", "multiline.parser: docker, cri", "docker"),
        ("format: json_lines", "format: msgpack", "msgpack"),
        ("service:\n", "includes:\n  - other.yaml\nservice:\n", "includes"),
        ("  flush: 1\n", "  flush: 1\n  grace: 5\n", "grace"),
        ("    format: json ", "    format: logfmt ", "logfmt"),
        ("audit.$TAG false", "audit.$kind false", "$kind"),
    ],
)
def test_anything_the_forwarder_does_not_run_is_an_error_naming_it(
    tmp_path: Path, old: str, new: str, named: str
) -> None:
    text = DEFAULT_CONFIG.read_text()
    assert old in text
    (tmp_path / "redact.lua").write_text((COMPONENT / "redact.lua").read_text())
    changed = tmp_path / "fluent-bit.yaml"
    changed.write_text(text.replace(old, new, 1))
    with pytest.raises(ForwardError, match=named.replace("$", r"\$")):
        Pipeline(load_config(changed, siem_env(8080)))


def test_variables_must_be_set_and_set_overrides_a_key() -> None:
    env = siem_env(8080)
    del env["SIEM_HOST"]
    with pytest.raises(ForwardError, match=r"\$\{SIEM_HOST\} is not set"):
        load_config(DEFAULT_CONFIG, env)
    config = load_config(DEFAULT_CONFIG, env, ["siem-audit.host=10.0.0.1", "siem-logs.HOST=10.0.0.2"])
    assert [Pipeline(config).outputs[i].url for i in (0, 1)] == [
        "http://10.0.0.1:8080/audit",
        "http://10.0.0.2:8080/logs",
    ]
    with pytest.raises(ForwardError, match="no input, filter or output has alias 'nope'"):
        load_config(DEFAULT_CONFIG, siem_env(8080), ["nope.host=x"])


# --- Lua redaction, in real Lua, against trainerop_common.redaction ----------------------------

REDACTION_CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "env entry",
        {"env": [{"name": "API_TOKEN", "value": "s3cr3t"}, {"name": "db_Password", "value": "pw"}]},
        {"env": [{"name": "API_TOKEN", "value": "***"}, {"name": "db_Password", "value": "***"}]},
    ),
    (
        "NAME=value text",
        {"message": "starting with HF_TOKEN=hf_abc and password: hunter2, EPOCHS=10 'api_key': 'k1'"},
        {"message": "starting with HF_TOKEN=*** and password: ***, EPOCHS=10 'api_key': '***'"},
    ),
    (
        "JSON text",
        {"log": '{"aws_secret_access_key": "xyz", "region": "eu"}'},
        {"log": '{"aws_secret_access_key": "***", "region": "eu"}'},
    ),
    (
        "nested",
        {"pod": {"spec": {"containers": [{"env": [{"name": "X_SECRET", "value": "v"}], "args": ["--key=k"]}]}}},
        {"pod": {"spec": {"containers": [{"env": [{"name": "X_SECRET", "value": "***"}], "args": ["--key=***"]}]}}},
    ),
    (
        "non-secret names untouched",
        {"env": [{"name": "NCCL_IB_TIMEOUT", "value": "22"}], "tolerations": [{"key": "usage", "value": "training"}]},
        {"env": [{"name": "NCCL_IB_TIMEOUT", "value": "22"}], "tolerations": [{"key": "usage", "value": "training"}]},
    ),
    (
        "references to secrets untouched",
        {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "vault", "key": "api"}}, "secret": "vault"},
        {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "vault", "key": "api"}}, "secret": "vault"},
    ),
    (
        "numbers and booleans untouched",
        {"name": "API_KEY", "value": 42, "retries": 3, "ok": True, "ratio": 0.5, "token": False},
        {"name": "API_KEY", "value": 42, "retries": 3, "ok": True, "ratio": 0.5, "token": False},
    ),
    ("already masked", {"message": "API_TOKEN=***"}, {"message": "API_TOKEN=***"}),
]


@pytest.mark.parametrize(("case", "record", "expected"), REDACTION_CASES, ids=[c[0] for c in REDACTION_CASES])
def test_lua_masks_what_the_python_redaction_masks(
    lua: LuaFilter, case: str, record: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert redact(record) == expected  # the table agrees with the rules the controllers apply
    assert lua_redact(lua, record) == expected


def test_an_untouched_record_is_kept_as_it_was_and_a_masked_one_converted_as_fluent_bit_does(lua: LuaFilter) -> None:
    clean: dict[str, Any] = {"message": "ok", "items": [], "meta": {}, "none": None}
    assert lua_redact(lua, clean) is clean  # code 0: fluent-bit keeps the original record
    dirty: dict[str, Any] = {"message": "TOKEN=x", "items": [], "meta": {}, "none": None, "n": 3, "f": 2.5}
    # code 2: the table comes back; nil drops the null key, arrays and maps keep their kind.
    assert lua_redact(lua, dirty) == {"message": "TOKEN=***", "items": [], "meta": {}, "n": 3, "f": 2.5}


TEXT = st.lists(
    st.sampled_from(
        [
            *("API_TOKEN", "key", "Secret", "passwd", "PASSWORD", "tokenizer", "name", "x.y-z", "EPOCHS", "10"),
            *("=", ":", " ", "  ", '"', "'", ",", "}", "{", "\t", "-", ".", "_", "abc", "v=1"),
        ]
    ),
    max_size=12,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=TEXT)
def test_lua_and_python_mask_any_ascii_text_alike(text: str) -> None:
    lua = LuaFilter({"script": "redact.lua", "call": "redact_record"}, "filter redact", COMPONENT)
    assert lua_redact(lua, {"m": text}) == {"m": redact_text(text)}


def test_next_to_a_non_ascii_letter_lua_masks_where_python_does_not(lua: LuaFilter) -> None:
    # Python's \b sees no word boundary between "é" and "API_TOKEN"; Lua's byte patterns do.
    # (redact.lua documents the differences beyond ASCII.)
    assert redact_text("éAPI_TOKEN=1") == "éAPI_TOKEN=1"
    assert lua_redact(lua, {"m": "éAPI_TOKEN=1"}) == {"m": "éAPI_TOKEN=***"}


# --- tail + cri parser ------------------------------------------------------------------------


def test_cri_partial_lines_are_joined_per_stream(tmp_path: Path) -> None:
    audit = json.dumps(AUDIT, sort_keys=True)
    write_log(
        tmp_path,
        [
            cri(audit[:30], "stdout", partial=True),
            cri(json.dumps(LOG), "stderr"),  # the other stream, in between
            cri(audit[30:60], "stdout", partial=True, time="2026-11-30T01:02:04Z"),
            cri(audit[60:], "stdout"),
        ],
    )
    tail = Pipeline(load_config(DEFAULT_CONFIG, siem_env(8080)), str(tmp_path)).inputs[0]
    events = tail.poll(final=True)
    assert [(e[2]["stream"], e[2]["log"]) for e in events] == [("stderr", json.dumps(LOG)), ("stdout", audit)]
    assert events[1][1] == pytest.approx(logforward.parse_time(T0))  # the first part's time
    assert events[0][0] == "kube." + str(tmp_path / POD_LOG.format(c="audit")).lstrip("/").replace("/", ".")


def test_following_picks_up_appended_lines_and_holds_unfinished_ones(tmp_path: Path) -> None:
    path = write_log(tmp_path, [cri("one")])
    tail = Pipeline(load_config(DEFAULT_CONFIG, siem_env(8080)), str(tmp_path)).inputs[0]
    assert [e[2]["log"] for e in tail.poll(final=False)] == ["one"]
    with path.open("a") as handle:
        handle.write(cri("two") + f"{T0} stderr F thr")
    assert [e[2]["log"] for e in tail.poll(final=False)] == ["two"]
    with path.open("a") as handle:
        handle.write("ee\n")
    assert [e[2]["log"] for e in tail.poll(final=False)] == ["three"]


def test_parse_time_reads_the_kubelet_nanosecond_timestamps() -> None:
    assert logforward.parse_time("1970-01-01T00:00:01.5Z") == 1.5
    assert logforward.parse_time("1970-01-01T01:00:01.000000001+01:00") == pytest.approx(1.000000001)
    assert logforward.parse_time("yesterday") is None


# --- the whole pipeline against a real HTTP receiver -----------------------------------------


def test_an_audit_record_goes_to_the_audit_output_and_a_log_line_to_the_log_output(tmp_path: Path) -> None:
    raw = "Traceback (most recent call last): not JSON"
    write_log(
        tmp_path, [cri(json.dumps(AUDIT, sort_keys=True), "stdout"), cri(json.dumps(LOG)), cri(raw), cri("[1, 2]")]
    )
    other = tmp_path / POD_LOG.format(c="audit").replace("_trainer-operator-system_", "_team-a_")
    other.write_text(cri(json.dumps(AUDIT), "stdout"))  # another namespace: not tailed
    forwarder = tmp_path / (
        "trainer-operator-log-forwarding-x2x4z_trainer-operator-system_fluent-bit-" + "b" * 64 + ".log"
    )
    forwarder.write_text(cri(json.dumps(LOG)))  # fluent-bit's own log: not tailed (no loop)
    with Receiver() as receiver:
        pipeline = run(tmp_path, receiver)
    assert receiver.records("/audit") == [AUDIT]  # as printed: the CRI fields are dropped
    assert receiver.records("/logs") == [
        LOG,
        {"time": T0, "stream": "stderr", "_p": "F", "log": raw},  # not JSON: passed on as a raw log
        {"time": T0, "stream": "stderr", "_p": "F", "log": "[1, 2]"},  # JSON, but not an object
    ]
    assert [(o.forwarded, o.requests) for o in pipeline.outputs] == [(1, 1), (3, 1)]


def test_the_http_output_posts_json_lines_with_its_headers(tmp_path: Path) -> None:
    write_log(tmp_path, [cri(json.dumps(LOG)), cri(json.dumps({**LOG, "message": "API_TOKEN=hunter2"}))])
    with Receiver() as receiver:
        run(tmp_path, receiver, ("siem-logs.http_user=fluent", "siem-logs.http_passwd=bit"))
    (request,) = receiver.requests
    assert request.path == "/logs"
    assert request.headers["Content-Type"] == "application/x-ndjson"
    assert request.headers["X-Trainer-Operator-Stream"] == "logs"
    assert request.headers["Authorization"] == "Basic Zmx1ZW50OmJpdA=="
    assert request.body.endswith(b"\n")
    assert [json.loads(line) for line in request.body.decode().splitlines()] == [
        LOG,
        {**LOG, "message": "API_TOKEN=***"},
    ]


def test_the_http_output_retries_until_accepted_and_gives_up_on_a_refusal(tmp_path: Path) -> None:
    write_log(tmp_path, [cri(json.dumps(LOG))])
    with Receiver(statuses=[503, 429]) as receiver:
        run(tmp_path, receiver)
    assert [r.status for r in receiver.requests] == [503, 429, 200]
    assert receiver.records("/logs") == [LOG]
    with Receiver(statuses=[400]) as receiver, pytest.raises(ForwardError, match=r"HTTP 400.*not retried"):
        run(tmp_path, receiver)
    assert len(receiver.requests) == 1
    with Receiver(statuses=[500] * 10) as receiver, pytest.raises(ForwardError, match="gave up after 6 attempt"):
        run(tmp_path, receiver)  # siem-logs: retry_limit 5
    assert len(receiver.requests) == 6


def test_the_command_exits_non_zero_with_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_log(tmp_path, [cri(json.dumps(LOG))])
    with Receiver(statuses=[403]) as receiver:
        for name, value in siem_env(receiver.port).items():
            monkeypatch.setenv(name, value)
        code = logforward.main(["forward", "--path", str(tmp_path), "--retry-wait", "0"])
    assert code == 1
    assert "logforward: error: output siem-logs: http://127.0.0.1:" in capsys.readouterr().err
