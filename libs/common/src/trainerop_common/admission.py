"""Admission webhooks for Trainers (docs/admission.md): what a check sees and answers (pure).

A controller that owns a concern registers a check of it with ``Runtime.admit``:
``check(request) -> Verdict``, where the decision is made by the controller's pure functions and
the check only gathers what they need. The runtime serves every check at ``/<webhook id>`` over
HTTPS through kopf's admission support (``--webhook-port``); deploy/ names the ids in the webhook
configurations, whose ``matchConditions`` send only the requests a check has something to say
about (a user's CREATE, or an UPDATE that changes what it looks at): the operator's own writes
(status, finalizers) never wait for a webhook.
"""

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Request:
    """What a check sees of one admission request for a Trainer."""

    operation: str  # CREATE or UPDATE
    namespace: str
    name: str
    spec: Mapping[str, Any]
    old_spec: Mapping[str, Any] | None  # UPDATE only
    labels: Mapping[str, str] = field(default_factory=dict)

    def changed(self, *path: str) -> bool:
        """Whether the request sets ``spec.<path>`` to something new (always, on CREATE)."""
        return self.old_spec is None or _get(self.spec, path) != _get(self.old_spec, path)


def _get(spec: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = spec
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


@dataclass(frozen=True)
class Verdict:
    problems: tuple[str, ...] = ()  # why the request is refused; none: allowed
    warnings: tuple[str, ...] = ()  # shown to the user (kubectl prints them), the request goes on
    spec: Mapping[str, Any] = field(default_factory=dict)  # mutating: top-level spec fields to set

    @property
    def allowed(self) -> bool:
        return not self.problems


Check = Callable[[Request], Awaitable[Verdict]]
# A check of the creation of another kind's object: (its plural, the object) -> the verdict.
ObjectCheck = Callable[[str, Mapping[str, Any]], Awaitable[Verdict]]
REFUSED = 422  # Unprocessable Entity, as the API server's own validation answers


def request_of(body: Mapping[str, Any], old: Mapping[str, Any] | None, operation: str) -> Request:
    meta = body.get("metadata") or {}
    return Request(
        operation=operation,
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or meta.get("generateName") or ""),
        spec=body.get("spec") or {},
        old_spec=(old.get("spec") or {}) if old is not None and operation == "UPDATE" else None,
        labels=meta.get("labels") or {},
    )
