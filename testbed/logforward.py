#!/usr/bin/env python3
"""Run the fluent-bit pipeline of deploy/components/log-forwarding here, without fluent-bit.

    python -m testbed.logforward forward [--config FILE] [--path DIR|GLOB] [--follow]
                                      [--set ALIAS.KEY=VALUE ...] [--retry-wait SECONDS]
    python -m testbed.logforward receive [--port 8080]   # a local SIEM stand-in printing what arrives

fluent-bit is in neither Debian bookworm nor PyPI, so the tests and local development run this
forwarder instead. It reads the same YAML configuration and executes its pipeline with
fluent-bit's semantics for exactly the plugins and keys that configuration uses:

  input  tail     the files matching `path` (read once; with --follow, followed), tag expansion,
                  `multiline.parser: cri` (`<time> <stream> <P|F> <log>`, P parts joined per stream)
  filter parser   a `format: json` parser on `key_name`, `reserve_data`, `preserve_key`
  filter lua      the script run in real Lua (LuaJIT through lupa) with fluent-bit's contract:
                  cb(tag, timestamp, record) -> code, timestamp, record
  filter rewrite_tag  `$KEY REGEX NEW_TAG KEEP`; the new record re-enters the filter chain
  output http     POST, `format: json_lines`, headers, basic auth, TLS, retries, `match`

Any other section, plugin, key or value is an error naming it, so the configuration and this
forwarder cannot drift apart silently. Keys that only tune fluent-bit's own buffering and state
(db, storage.*, mem_buf_limit, ...) are accepted and have no effect here. Values may use ${VAR}
(the process environment, as fluent-bit substitutes it; an unset variable is an error here,
where fluent-bit would substitute an empty string). `--set ALIAS.KEY=VALUE` sets a key of the
input, filter or output with that `alias` (or of `service`) before substitution.

Where fluent-bit would log and carry on, this forwarder stops with a non-zero exit: a Lua error
(fluent-bit's protected mode would pass the record through unredacted), and an output whose
retries are exhausted or that answers 4xx (fluent-bit would drop the chunk).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import glob
import importlib
import json
import os
import re
import signal
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TextIO

import yaml

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO / "deploy" / "components" / "log-forwarding" / "fluent-bit.yaml"
BATCH = 500  # records per HTTP request

Record = dict[str, Any]
Event = tuple[str, float, Record]  # tag, timestamp, record


class ForwardError(Exception):
    """A configuration this forwarder cannot execute faithfully, or a delivery that failed."""


# Per plugin: the keys executed here, and the keys that only tune fluent-bit itself.
SERVICE_KEYS = frozenset(
    {"flush", "log_level", "daemon", "http_server", "http_listen", "http_port", "health_check"}
    | {"storage.path", "storage.sync", "storage.backlog.mem_limit"}
)
PARSER_KEYS = frozenset({"name", "format"})
PLUGINS: dict[str, dict[str, tuple[frozenset[str], frozenset[str]]]] = {
    "inputs": {
        "tail": (
            frozenset({"name", "alias", "tag", "path", "multiline.parser", "read_from_head"}),
            frozenset({"db", "db.locking", "mem_buf_limit", "skip_long_lines", "refresh_interval", "storage.type"}),
        ),
    },
    "filters": {
        "parser": (
            frozenset({"name", "alias", "match", "key_name", "parser", "reserve_data", "preserve_key"}),
            frozenset(),
        ),
        "lua": (frozenset({"name", "alias", "match", "script", "call"}), frozenset()),
        "rewrite_tag": (
            frozenset({"name", "alias", "match", "rule"}),
            frozenset({"emitter_name", "emitter_storage.type", "emitter_mem_buf_limit"}),
        ),
    },
    "outputs": {
        "http": (
            frozenset({"name", "alias", "match", "host", "port", "uri", "format", "header", "json_date_key"})
            | {"json_date_format", "tls", "tls.verify", "tls.verify_hostname", "tls.ca_file", "retry_limit"}
            | {"http_user", "http_passwd"},
            frozenset({"workers", "storage.total_limit_size"}),
        ),
    },
}
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def flag(value: str, what: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("on", "true", "yes", "1"):
        return True
    if lowered in ("off", "false", "no", "0"):
        return False
    raise ForwardError(f"{what}: {value!r} is not a boolean (on/off, true/false)")


def tag_matches(pattern: str, tag: str) -> bool:
    """fluent-bit's `match`: `*` matches any run of characters, everything else literally."""
    return re.fullmatch(".*".join(re.escape(part) for part in pattern.split("*")), tag) is not None


# ---------------------------------------------------------------------------------------------
# Configuration


@dataclass
class Config:
    path: Path
    service: dict[str, str]
    parsers: dict[str, dict[str, str]]
    inputs: list[dict[str, Any]]
    filters: list[dict[str, Any]]
    outputs: list[dict[str, Any]]


def _section(items: Any, where: str) -> list[dict[str, Any]]:
    if items is None:
        return []
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ForwardError(f"{where} must be a list of maps")
    out = []
    for item in items:
        lowered = {str(k).lower(): v for k, v in item.items()}
        if len(lowered) != len(item):
            raise ForwardError(f"{where}: a key is given twice (keys are case-insensitive)")
        if "name" not in lowered:
            raise ForwardError(f"{where}: an entry has no name")
        out.append(lowered)
    return out


def _label(section: str, entry: Mapping[str, Any], index: int) -> str:
    return f"{section[:-1]} {entry.get('alias') or entry['name'] + '.' + str(index)}"


def _substitute(value: Any, env: Mapping[str, str], where: str) -> Any:
    if isinstance(value, list):
        return [_substitute(v, env, where) for v in value]
    if not isinstance(value, str):
        raise ForwardError(f"{where}: nested maps are not supported here")

    def lookup(match: re.Match[str]) -> str:
        if match[1] not in env:
            raise ForwardError(f"{where}: ${{{match[1]}}} is not set (export it, or override the key with --set)")
        return env[match[1]]

    return _VAR.sub(lookup, value)


def load_config(path: Path, env: Mapping[str, str] | None = None, overrides: Sequence[str] = ()) -> Config:
    """Parse a fluent-bit YAML file, apply --set overrides and ${VAR}s, and check every key."""
    env = os.environ if env is None else env
    try:
        # Every scalar as a string, as fluent-bit reads them (`off` stays "off", 2020 stays "2020").
        raw = yaml.load(path.read_text(), Loader=yaml.BaseLoader)
    except (OSError, yaml.YAMLError) as err:
        raise ForwardError(f"{path}: {err}") from err
    if not isinstance(raw, dict):
        raise ForwardError(f"{path}: not a fluent-bit YAML configuration")
    unknown = sorted(set(raw) - {"service", "parsers", "pipeline"})
    if unknown:
        raise ForwardError(f"{path}: section(s) {', '.join(unknown)} not supported by testbed/logforward.py")
    pipeline = raw.get("pipeline") or {}
    if not isinstance(pipeline, dict) or set(pipeline) - {"inputs", "filters", "outputs"}:
        raise ForwardError(f"{path}: pipeline may hold only inputs, filters and outputs")
    service = {str(k).lower(): v for k, v in (raw.get("service") or {}).items()}
    sections = {s: _section(pipeline.get(s), f"pipeline.{s}") for s in ("inputs", "filters", "outputs")}

    for override in overrides:
        target, dot, rest = override.partition(".")
        key, eq, value = rest.partition("=")
        if not (dot and eq and key):
            raise ForwardError(f"--set {override!r}: expected ALIAS.KEY=VALUE")
        entries = (
            [service] if target == "service" else [e for s in sections.values() for e in s if e.get("alias") == target]
        )
        if not entries:
            raise ForwardError(f"--set {override!r}: no input, filter or output has alias {target!r}")
        for entry in entries:
            entry[key.lower()] = value

    bad = sorted(set(service) - SERVICE_KEYS)
    if bad:
        raise ForwardError(f"service: key(s) {', '.join(bad)} not supported by testbed/logforward.py")
    service = {k: _substitute(v, env, f"service.{k}") for k, v in service.items()}
    for section, entries in sections.items():
        for index, entry in enumerate(entries):
            label = _label(section, entry, index)
            known = PLUGINS[section].get(entry["name"])
            if known is None:
                raise ForwardError(f"{label}: plugin {entry['name']!r} not supported by testbed/logforward.py")
            bad = sorted(set(entry) - known[0] - known[1])
            if bad:
                raise ForwardError(f"{label}: key(s) {', '.join(bad)} not supported by testbed/logforward.py")
            for key in list(entry):
                entry[key] = _substitute(entry[key], env, f"{label}: {key}")

    parsers: dict[str, dict[str, str]] = {}
    for entry in _section(raw.get("parsers"), "parsers"):
        bad = sorted(set(entry) - PARSER_KEYS)
        if bad or entry.get("format") != "json":
            what = f"key(s) {', '.join(bad)}" if bad else f"format {entry.get('format')!r}"
            raise ForwardError(f"parser {entry['name']}: {what} not supported by testbed/logforward.py (json only)")
        parsers[entry["name"]] = entry
    return Config(path, service, parsers, sections["inputs"], sections["filters"], sections["outputs"])


# ---------------------------------------------------------------------------------------------
# Input: tail + cri multiline parser

_CRI = re.compile(r"^(?P<time>.+?) (?P<stream>stdout|stderr) (?P<_p>F|P) (?P<log>.*)$", re.DOTALL)
_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)$")


def parse_time(text: str) -> float | None:
    """An RFC 3339 time with up to nanoseconds (the kubelet's) as seconds since the epoch."""
    match = _RFC3339.match(text)
    if not match:
        return None
    zone = "+00:00" if match[3] == "Z" else match[3]
    try:
        base = dt.datetime.fromisoformat(match[1] + zone)
    except ValueError:
        return None
    return base.timestamp() + float("0." + (match[2] or "0"))


@dataclass
class _File:
    inode: int
    offset: int = 0
    rest: bytes = b""
    partial: dict[str, tuple[float, Record, list[str]]] = field(default_factory=dict)


class Tail:
    """The tail input with `multiline.parser: cri`: one record per complete CRI log line."""

    def __init__(self, entry: Mapping[str, Any], label: str, path_override: str | None = None) -> None:
        if entry.get("multiline.parser", "").replace(" ", "") != "cri":
            raise ForwardError(f"{label}: multiline.parser {entry.get('multiline.parser')!r} (only `cri` runs here)")
        if "path" not in entry or "tag" not in entry:
            raise ForwardError(f"{label}: path and tag are required here")
        flag(entry.get("read_from_head", "false"), f"{label}: read_from_head")  # files are always read whole
        self.label, self.tag = label, str(entry["tag"])
        self.patterns = [p.strip() for p in str(entry["path"]).split(",") if p.strip()]
        if path_override and os.path.isdir(path_override):
            self.patterns = [os.path.join(path_override, os.path.basename(p)) for p in self.patterns]
        elif path_override:
            self.patterns = [path_override]
        self.files: dict[str, _File] = {}
        self.lines = 0

    def poll(self, final: bool) -> list[Event]:
        """Records from lines appended since the last poll. `final`: the last, unfinished line
        and pending partial lines are emitted too (fluent-bit flushes them after a timeout)."""
        events: list[Event] = []
        for path in sorted({p for pattern in self.patterns for p in glob.glob(pattern)}):
            try:
                stat = os.stat(path)
                state = self.files.get(path)
                if state is None or state.inode != stat.st_ino or stat.st_size < state.offset:
                    state = self.files[path] = _File(stat.st_ino)  # new, rotated or truncated
                with open(path, "rb") as handle:
                    handle.seek(state.offset)
                    data = handle.read()
            except FileNotFoundError:
                continue
            state.offset += len(data)
            lines = (state.rest + data).split(b"\n")
            state.rest = lines.pop()
            if final and state.rest:
                lines.append(state.rest)
                state.rest = b""
            tag = self.tag.replace("*", os.path.abspath(path).lstrip("/").replace("/", "."))
            for raw in lines:
                self.lines += 1
                event = self._cri(state, raw.decode("utf-8", errors="replace"))
                if event:
                    events.append((tag, *event))
            if final:
                for ts, fields, parts in state.partial.values():
                    events.append((tag, ts, {**fields, "log": "".join(parts)}))
                state.partial.clear()
        return events

    @staticmethod
    def _cri(state: _File, line: str) -> tuple[float, Record] | None:
        match = _CRI.match(line)
        if not match:
            return time.time(), {"log": line}  # not a CRI line: passed on as it is
        ts = parse_time(match["time"])
        ts = time.time() if ts is None else ts
        fields: Record = {"time": match["time"], "stream": match["stream"], "_p": match["_p"]}
        if match["_p"] == "P":
            state.partial.setdefault(match["stream"], (ts, fields, []))[2].append(match["log"])
            return None
        if match["stream"] in state.partial:
            # The joined record keeps the first part's time and fields (fluent-bit's flb_ml).
            ts, fields, parts = state.partial.pop(match["stream"])
            return ts, {**fields, "log": "".join(parts) + match["log"]}
        return ts, {**fields, "log": match["log"]}


# ---------------------------------------------------------------------------------------------
# Filters: each returns the records that continue under the same tag and the re-emitted events.

FilterResult = tuple[list[tuple[float, Record]], list[Event]]


class ParserFilter:
    def __init__(self, entry: Mapping[str, Any], label: str, parsers: Mapping[str, Any]) -> None:
        if entry.get("parser") not in parsers:
            raise ForwardError(f"{label}: parser {entry.get('parser')!r} is not defined in the parsers section")
        if "key_name" not in entry:
            raise ForwardError(f"{label}: key_name is required")
        self.key = str(entry["key_name"])
        self.reserve = flag(entry.get("reserve_data", "off"), f"{label}: reserve_data")
        self.preserve = flag(entry.get("preserve_key", "off"), f"{label}: preserve_key")

    def apply(self, tag: str, ts: float, record: Record) -> FilterResult:
        value = record.get(self.key)
        try:
            parsed = json.loads(value) if isinstance(value, str) else None
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            return [(ts, record)], []  # not parsed: the record goes on unchanged
        kept = {
            k: v for k, v in record.items() if (self.reserve and k != self.key) or (self.preserve and k == self.key)
        }
        return [(ts, {**parsed, **kept})], []


def _lupa() -> Any:
    """lupa's LuaJIT 2.1 (fluent-bit embeds LuaJIT), else its default Lua."""
    try:
        return importlib.import_module("lupa.luajit21")
    except ImportError:
        try:
            return importlib.import_module("lupa")
        except ImportError as err:
            raise ForwardError("the lua filter needs lupa: pip install 'lupa>=2,<3'") from err


class LuaFilter:
    """fluent-bit's lua filter: cb(tag, timestamp, record) -> code, timestamp, record with codes
    -1 drop, 0 keep the original, 1 replace timestamp and record, 2 replace the record only; a
    returned array of tables splits the record. Records cross into Lua as fluent-bit converts
    them: null becomes nil (the key disappears), arrays keep being arrays (a metatable marks
    them, as fluent-bit does), integral numbers come back as integers."""

    def __init__(self, entry: Mapping[str, Any], label: str, base: Path) -> None:
        self.label = label
        script = base / str(entry.get("script", ""))
        self.lupa = _lupa()
        self.lua = self.lupa.LuaRuntime(unpack_returned_tuples=True)
        try:
            self.lua.execute(script.read_text())
        except (OSError, self.lupa.LuaError) as err:
            raise ForwardError(f"{label}: cannot load {script}: {err}") from err
        self.call = self.lua.globals()[str(entry.get("call", ""))]
        if self.lupa.lua_type(self.call) != "function":
            raise ForwardError(f"{label}: {script} defines no function {entry.get('call')!r}")
        self._mark_array, self._is_array = self.lua.execute(
            "local array = {}\n"
            "return function(t) return setmetatable(t, array) end, function(t) return getmetatable(t) == array end"
        )

    def to_lua(self, value: Any) -> Any:
        if isinstance(value, dict):
            table = self.lua.table()
            for key, item in value.items():
                if item is not None:
                    table[key] = self.to_lua(item)
            return table
        if isinstance(value, list):
            table = self.lua.table()
            for index, item in enumerate(value, 1):
                if item is not None:
                    table[index] = self.to_lua(item)
            return self._mark_array(table)
        return value

    def from_lua(self, value: Any) -> Any:
        if self.lupa.lua_type(value) != "table":
            return value
        items = list(value.items())
        keys = [k for k, _ in items]
        if keys and all(isinstance(k, int) and k > 0 for k in keys) and max(keys) == len(keys):
            return [self.from_lua(value[i]) for i in range(1, len(keys) + 1)]
        if not keys and self._is_array(value):
            return []  # an empty array stays an array; an empty map stays a map
        return {str(k): self.from_lua(v) for k, v in items}

    def apply(self, tag: str, ts: float, record: Record) -> FilterResult:
        try:
            result = self.call(tag, ts, self.to_lua(record))
        except self.lupa.LuaError as err:
            raise ForwardError(f"{self.label}: the Lua callback failed: {err}") from err
        if not isinstance(result, tuple) or len(result) != 3:
            raise ForwardError(f"{self.label}: the Lua callback must return code, timestamp, record")
        code, new_ts, new_record = result
        if code == -1:
            return [], []
        if code == 0:
            return [(ts, record)], []
        if code not in (1, 2):
            raise ForwardError(f"{self.label}: the Lua callback returned code {code!r}")
        ts = float(new_ts) if code == 1 else ts
        out = self.from_lua(new_record)
        records = out if isinstance(out, list) else [out]
        if not all(isinstance(r, dict) for r in records):
            raise ForwardError(f"{self.label}: the Lua callback returned a record that is not a table")
        return [(ts, r) for r in records], []


class RewriteTag:
    """rewrite_tag rules `$KEY REGEX NEW_TAG KEEP`; placeholders $TAG, $TAG[n] and $0..$9."""

    _KEY = re.compile(r"^\$(\w+)((?:\['[^']*'\])*)$")
    _PLACEHOLDER = re.compile(r"\$TAG\[(\d+)\]|\$TAG|\$(\d)")

    def __init__(self, entry: Mapping[str, Any], label: str) -> None:
        rules = entry.get("rule")
        self.rules: list[tuple[list[str], re.Pattern[str], str, bool]] = []
        for rule in [rules] if isinstance(rules, str) else rules or []:
            parts = str(rule).split()
            key = self._KEY.match(parts[0]) if len(parts) == 4 else None
            if key is None:
                raise ForwardError(f"{label}: rule {rule!r} is not `$KEY REGEX NEW_TAG KEEP`")
            if "$" in self._PLACEHOLDER.sub("", parts[2]):
                raise ForwardError(f"{label}: rule {rule!r}: only $TAG, $TAG[n] and $0..$9 run here")
            path = [key[1], *re.findall(r"\['([^']*)'\]", key[2])]
            self.rules.append((path, re.compile(parts[1]), parts[2], flag(parts[3], f"{label}: keep")))
        if not self.rules:
            raise ForwardError(f"{label}: no rule")

    def apply(self, tag: str, ts: float, record: Record) -> FilterResult:
        for path, regex, new_tag, keep in self.rules:
            value: Any = record
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            match = regex.search(value) if isinstance(value, str) else None
            if match is None:
                continue
            parts = tag.split(".")

            def fill(p: re.Match[str], parts: list[str] = parts, match: re.Match[str] = match) -> str:
                if p[1] is not None:
                    return parts[int(p[1])] if int(p[1]) < len(parts) else ""
                return tag if p[2] is None else (match.group(int(p[2])) or "")

            emitted: Event = (self._PLACEHOLDER.sub(fill, new_tag), ts, record)
            return ([(ts, record)] if keep else []), [emitted]
        return [(ts, record)], []


Filter = ParserFilter | LuaFilter | RewriteTag


# ---------------------------------------------------------------------------------------------
# Output: http


class HttpOutput:
    def __init__(self, entry: Mapping[str, Any], label: str) -> None:
        self.label, self.match = label, str(entry.get("match", ""))
        if entry.get("format", "json") != "json_lines":
            raise ForwardError(f"{label}: format {entry.get('format', 'json')!r} (only json_lines runs here)")
        tls = flag(entry.get("tls", "off"), f"{label}: tls")
        host, port, uri = entry.get("host", "127.0.0.1"), entry.get("port", "80"), entry.get("uri", "/")
        self.url = f"{'https' if tls else 'http'}://{host}:{port}{uri if uri.startswith('/') else '/' + uri}"
        self.context: ssl.SSLContext | None = None
        if tls:
            self.context = ssl.create_default_context(cafile=entry.get("tls.ca_file"))
            if not flag(entry.get("tls.verify", "on"), f"{label}: tls.verify"):
                self.context.check_hostname, self.context.verify_mode = False, ssl.CERT_NONE
            elif not flag(entry.get("tls.verify_hostname", "off"), f"{label}: tls.verify_hostname"):
                self.context.check_hostname = False
        date_key = str(entry.get("json_date_key", "date"))
        self.date_key = None if date_key.lower() in ("false", "off") else date_key
        self.date_format = entry.get("json_date_format", "double")
        if self.date_format not in ("double", "epoch", "iso8601"):
            raise ForwardError(f"{label}: json_date_format {self.date_format!r} (double, epoch or iso8601 here)")
        headers = entry.get("header", [])
        self.headers = {"Content-Type": "application/x-ndjson", "User-Agent": "Fluent-Bit"}
        for header in [headers] if isinstance(headers, str) else headers:
            name, _, value = str(header).strip().partition(" ")
            self.headers[name] = value.strip()
        if entry.get("http_user"):
            token = f"{entry['http_user']}:{entry.get('http_passwd', '')}".encode()
            self.headers["Authorization"] = "Basic " + base64.b64encode(token).decode()
        limit = str(entry.get("retry_limit", "1")).lower()
        if limit in ("no_limits", "false"):
            self.retry_limit: int | None = None
        elif limit == "no_retries":
            self.retry_limit = 0
        elif limit.isdigit():
            self.retry_limit = int(limit)
        else:
            raise ForwardError(f"{label}: retry_limit {limit!r} is not a number, no_limits or no_retries")
        self.forwarded = self.requests = 0

    def line(self, ts: float, record: Record) -> str:
        if self.date_key:
            when: Any = ts if self.date_format == "double" else int(ts)
            if self.date_format == "iso8601":
                when = dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            record = {self.date_key: when, **record}
        return json.dumps(record, separators=(",", ":"))

    def send(self, events: Sequence[tuple[float, Record]], retry_wait: float, log: TextIO) -> None:
        for start in range(0, len(events), BATCH):
            batch = events[start : start + BATCH]
            body = "".join(self.line(ts, r) + "\n" for ts, r in batch).encode()
            self._post(body, retry_wait, log)
            self.forwarded += len(batch)
            self.requests += 1

    def _post(self, body: bytes, retry_wait: float, log: TextIO) -> None:
        attempt = 0
        while True:
            request = urllib.request.Request(self.url, data=body, headers=self.headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=30, context=self.context) as response:
                    status, problem = response.status, f"HTTP {response.status}"
            except urllib.error.HTTPError as err:
                status, problem = err.code, f"HTTP {err.code}"
            except (urllib.error.URLError, OSError) as err:
                status, problem = 0, str(getattr(err, "reason", err))
            if 200 <= status <= 205:
                return
            if 400 <= status < 500 and status not in (408, 429):
                raise ForwardError(f"{self.label}: {self.url} refused the records ({problem}); not retried")
            if self.retry_limit is not None and attempt >= self.retry_limit:
                raise ForwardError(f"{self.label}: {self.url}: {problem}; gave up after {attempt + 1} attempt(s)")
            attempt += 1
            print(f"logforward: {self.label}: {self.url}: {problem}; retry {attempt}", file=log)
            time.sleep(min(retry_wait * 2 ** (attempt - 1), 30.0))


# ---------------------------------------------------------------------------------------------
# The pipeline


class Pipeline:
    def __init__(self, config: Config, path_override: str | None = None) -> None:
        self.config = config
        self.inputs = [Tail(e, _label("inputs", e, i), path_override) for i, e in enumerate(config.inputs)]
        self.filters: list[tuple[str, Filter]] = []
        for index, entry in enumerate(config.filters):
            label = _label("filters", entry, index)
            built: Filter
            if entry["name"] == "parser":
                built = ParserFilter(entry, label, config.parsers)
            elif entry["name"] == "lua":
                built = LuaFilter(entry, label, config.path.parent)
            else:
                built = RewriteTag(entry, label)
            self.filters.append((str(entry.get("match", "")), built))
        self.outputs = [HttpOutput(e, _label("outputs", e, i)) for i, e in enumerate(config.outputs)]
        self.flush = float(config.service.get("flush", "1"))
        self.records = 0

    def process(self, tag: str, ts: float, record: Record, depth: int = 0) -> list[Event]:
        """Run one record through the filters whose `match` takes its tag; re-emitted records
        (rewrite_tag) start again at the first filter under their new tag."""
        if depth > 8:
            raise ForwardError(f"rewrite_tag loop: tag {tag!r} was re-emitted {depth} times")
        pending, done = [(ts, record)], []
        for match, built in self.filters:
            if not tag_matches(match, tag):
                continue
            kept = []
            for one_ts, one in pending:
                keep, emitted = built.apply(tag, one_ts, one)
                kept.extend(keep)
                for event in emitted:
                    done.extend(self.process(*event, depth=depth + 1))
            pending = kept
        return done + [(tag, t, r) for t, r in pending]

    def route(self, events: Sequence[Event]) -> dict[int, list[tuple[float, Record]]]:
        routed: dict[int, list[tuple[float, Record]]] = {i: [] for i in range(len(self.outputs))}
        for event in events:
            self.records += 1
            for tag, ts, record in self.process(*event):
                for index, output in enumerate(self.outputs):
                    if tag_matches(output.match, tag):
                        routed[index].append((ts, record))
        return routed

    def cycle(self, final: bool, retry_wait: float, log: TextIO) -> None:
        events = [event for tail in self.inputs for event in tail.poll(final)]
        for index, batch in self.route(events).items():
            self.outputs[index].send(batch, retry_wait, log)

    def progress(self) -> str:
        lines = sum(t.lines for t in self.inputs)
        files = sum(len(t.files) for t in self.inputs)
        outs = "; ".join(f"{o.label}: {o.forwarded} forwarded in {o.requests} request(s)" for o in self.outputs)
        return f"logforward: {lines} line(s) from {files} file(s) -> {self.records} record(s); {outs}"


def forward(pipeline: Pipeline, follow: bool, retry_wait: float, log: TextIO, stop: threading.Event) -> None:
    if not follow:
        pipeline.cycle(True, retry_wait, log)
        print(pipeline.progress(), file=log)
        return
    last = ""
    while not stop.is_set():
        pipeline.cycle(False, retry_wait, log)
        if pipeline.progress() != last:
            last = pipeline.progress()
            print(last, file=log)
        stop.wait(pipeline.flush)
    pipeline.cycle(True, retry_wait, log)
    print(pipeline.progress(), file=log)


# ---------------------------------------------------------------------------------------------
# A SIEM stand-in for tests and local runs


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int


class Receiver:
    """An HTTP collector on 127.0.0.1 that keeps every POST; `statuses` answers the first
    requests with those codes (then 200), only those whose body `answers` picks when given;
    `echo` prints each accepted record line."""

    def __init__(
        self,
        port: int = 0,
        statuses: Sequence[int] = (),
        echo: TextIO | None = None,
        answers: Callable[[bytes], bool] = lambda _: True,
    ) -> None:
        self.requests: list[Received] = []
        queue, lock, requests = list(statuses), threading.Lock(), self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    status = queue.pop(0) if queue and answers(body) else 200
                    requests.append(Received(self.path, dict(self.headers.items()), body, status))
                    if echo and status < 300:
                        echo.write("".join(f"{self.path} {line}\n" for line in _lines(body)))
                        echo.flush()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()

    def records(self, path: str) -> list[Record]:
        """Every record accepted at ``path``, in arrival order."""
        return [json.loads(line) for r in self.requests if r.path == path and r.status < 300 for line in _lines(r.body)]


def _lines(body: bytes) -> Iterator[str]:
    return (line for line in body.decode().split("\n") if line)


# ---------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("forward", help="run the pipeline of a fluent-bit YAML configuration")
    run.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="fluent-bit YAML (default: %(default)s)")
    run.add_argument("--path", help="the tail input's files: a directory (the configured file pattern in it) or a glob")
    run.add_argument("--follow", action="store_true", help="keep following the files until interrupted")
    run.add_argument("--set", action="append", default=[], metavar="ALIAS.KEY=VALUE", help="override a key")
    run.add_argument("--retry-wait", type=float, default=1.0, help="first wait between retries, doubling (s)")
    receive = commands.add_parser("receive", help="a local HTTP collector that prints every record it receives")
    receive.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)

    stop = threading.Event()

    def interrupted(signum: int, frame: FrameType | None) -> None:
        stop.set()

    if args.command == "receive" or args.follow:  # stop cleanly; a one-shot run stops on Ctrl-C as usual
        signal.signal(signal.SIGTERM, interrupted)
        signal.signal(signal.SIGINT, interrupted)
    if args.command == "receive":
        with Receiver(args.port, echo=sys.stdout) as receiver:
            print(f"logforward: receiving on http://127.0.0.1:{receiver.port}/ (Ctrl-C stops)", file=sys.stderr)
            stop.wait()
        return 0
    try:
        pipeline = Pipeline(load_config(args.config, overrides=args.set), args.path)
        forward(pipeline, args.follow, args.retry_wait, sys.stderr, stop)
    except ForwardError as err:
        print(f"logforward: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
