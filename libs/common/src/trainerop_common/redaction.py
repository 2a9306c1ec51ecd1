"""Secret redaction: values of variables named like a token, key, secret or password are masked
everywhere the operator prints them (logs, Events, status)."""

import re
from typing import Any

MASK = "***"
_SECRET_NAME = re.compile(r"token|key|secret|password|passwd", re.IGNORECASE)
# NAME=value and NAME: value in free text, where NAME looks secret.
_ASSIGNMENT = re.compile(
    r"(?P<name>\b[A-Za-z0-9_.-]*?(?:token|key|secret|password|passwd)[A-Za-z0-9_.-]*)"
    r"(?P<sep>[\"']?\s*[=:]\s*)(?P<quote>[\"']?)(?P<value>[^\s\"',}]+)",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_text(text: str) -> str:
    return _ASSIGNMENT.sub(lambda m: f"{m['name']}{m['sep']}{m['quote']}{MASK}", text)


def redact(value: Any) -> Any:
    """A copy of ``value`` with secret-looking env values masked.

    Env-style entries (``{"name": "API_TOKEN", "value": "..."}``) have their value masked, and so
    has ``NAME=value`` text in strings. Names of Secrets and label keys are not secrets and stay.
    """
    if isinstance(value, dict):
        name = value.get("name")
        out = {}
        for key, item in value.items():
            if key == "value" and isinstance(name, str) and is_secret_name(name) and isinstance(item, str):
                out[key] = MASK
            else:
                out[key] = redact(item)
        return out
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return redact_text(value)
    return value
