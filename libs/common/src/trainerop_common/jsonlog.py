"""JSON logs, one object a line, with secrets redacted from messages and extra fields."""

import json
import logging
import sys
from typing import Any

from .redaction import redact, redact_text

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
# kopf attaches its settings and skip flags to every record; only the object reference is kept.
_DROPPED = {"settings", "k8s_skip"}


class JsonFormatter(logging.Formatter):
    def __init__(self, controller: str) -> None:
        super().__init__()
        self._controller = controller

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "controller": self._controller,
            "logger": record.name,
            "message": redact_text(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key == "k8s_ref":
                entry["object"] = redact(value)
            elif key not in _STANDARD and key not in _DROPPED and not key.startswith("_"):
                entry[key] = redact(value)
        if record.exc_info:
            entry["exception"] = redact_text(self.formatException(record.exc_info))
        return json.dumps(entry, default=str)


def setup(controller: str, level: str = "INFO") -> None:
    """Route every logger (kopf's included) through one redacting JSON handler on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(controller))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.Formatter.converter = __import__("time").gmtime
    quiet = logging.DEBUG if level.upper() == "DEBUG" else logging.WARNING
    # kopf logs every handler success; our controllers log their own decisions.
    for noisy in ("httpx", "httpcore", "httpx2", "httpcore2", "aiohttp.access", "kopf.objects"):
        logging.getLogger(noisy).setLevel(quiet)
