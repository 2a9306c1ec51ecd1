"""Which notifications a Trainer is due, and what they say (pure; delivery.py delivers them).

The audit controller notifies a webhook (Slack, Microsoft Teams or plain JSON) of chosen events:
a run Failed, Stalled or Succeeded (the trainer controller's conditions), and restart storms (a
role's ``recentFailures`` — failures in a row, each soon after the last — reaching a threshold).
``status.audit.notified`` remembers what was notified (per event the condition's transition
time, per role the restart count at the storm's notice), so a restarted controller sends nothing
twice and a storm is notified once. An event older than ``max_age`` when first seen (a notifier
turned on over old runs) is marked without being sent; one whose delivery this process tried and
failed is sent whatever its age.

Payloads carry the Trainer's namespace and name, the event, phase, the condition's reason and
message (with secret-looking values masked), restart counts and the time; never its spec, env or
anything read from a Secret.
"""

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from trainerop_common.api.base import Condition
from trainerop_common.clock import parse_time
from trainerop_common.redaction import redact_text

CONDITION_EVENTS = ("Failed", "Stalled", "Succeeded")
STORM = "RestartStorm"
EVENTS = (*CONDITION_EVENTS, STORM)
FORMATS = ("slack", "teams", "json")
RETRY_CAP_SECONDS = 300.0
ADAPTIVE_COLORS = {"Failed": "Attention", "Stalled": "Warning", "Succeeded": "Good", STORM: "Warning"}


@dataclass(frozen=True)
class Settings:
    events: frozenset[str] = frozenset(EVENTS)
    storm_failures: int = 3
    max_age: timedelta = timedelta(hours=1)


@dataclass(frozen=True)
class Notified:
    """``status.audit.notified``."""

    conditions: Mapping[str, str] = field(default_factory=dict)  # event -> transition time notified
    storms: Mapping[str, int] = field(default_factory=dict)  # role -> its restarts when notified

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> "Notified":
        raw = raw or {}
        return cls(dict(raw.get("conditions") or {}), {k: int(v) for k, v in (raw.get("restartStorms") or {}).items()})

    def to_k8s(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.conditions:
            out["conditions"] = dict(sorted(self.conditions.items()))
        if self.storms:
            out["restartStorms"] = dict(sorted(self.storms.items()))
        return out


@dataclass(frozen=True)
class RoleFailures:
    role: str
    restarts: int
    recent_failures: int
    last_failure: str | None


@dataclass(frozen=True)
class Notice:
    event: str
    namespace: str
    name: str
    phase: str
    reason: str
    message: str
    time: str  # when it happened (RFC 3339)
    role: str = ""  # a restart storm's role
    restarts: int = 0  # a restart storm's: the role's restarts so far

    def mark(self, notified: Notified) -> Notified:
        """``notified`` with this notice recorded."""
        if self.event == STORM:
            return replace(notified, storms={**notified.storms, self.role: self.restarts})
        return replace(notified, conditions={**notified.conditions, self.event: self.time})


def due(
    namespace: str,
    name: str,
    phase: str,
    conditions: Sequence[Condition],
    roles: Sequence[RoleFailures],
    notified: Notified,
    now: datetime,
    settings: Settings,
    attempted: Collection[tuple[str, str]] = (),
) -> tuple[list[Notice], list[Notice]]:
    """(notices to send, notices too old to send: mark them only). ``attempted``: (event, time) of
    notices whose delivery failed before; they are sent however old they are now."""
    notices: list[Notice] = []
    for c in conditions:
        if c.type in CONDITION_EVENTS and c.status == "True" and c.type in settings.events:
            stamp = c.last_transition_time or ""
            if notified.conditions.get(c.type) != stamp:
                notices.append(
                    Notice(c.type, namespace, name, phase, c.reason or "", redact_text(c.message or ""), stamp)
                )
    if STORM in settings.events:
        for r in roles:
            streak_start = r.restarts - r.recent_failures  # the restarts before this run of failures
            if r.recent_failures >= settings.storm_failures and notified.storms.get(r.role, -1) < streak_start + 1:
                message = (
                    f"{r.role}: {r.recent_failures} failures in a row, each soon after the last "
                    f"({r.restarts} restarts in all)"
                )
                when = r.last_failure or ""
                notices.append(Notice(STORM, namespace, name, phase, STORM, message, when, r.role, r.restarts))
    fresh: list[Notice] = []
    old: list[Notice] = []
    for n in notices:
        happened = _parse(n.time)
        too_old = happened is not None and now - happened > settings.max_age
        (old if too_old and (n.event, n.time) not in attempted else fresh).append(n)
    return fresh, old


def retry_delay(attempts: int, retry_after: float | None = None) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones: 1, 2, 4, … up to 5 minutes,
    or the receiver's Retry-After (within the same cap)."""
    if retry_after is not None:
        return min(max(retry_after, 1.0), RETRY_CAP_SECONDS)
    return min(2.0 ** max(attempts - 1, 0), RETRY_CAP_SECONDS)


def _parse(text: str) -> datetime | None:
    try:
        return parse_time(text) if text else None
    except ValueError:
        return None


def headline(n: Notice) -> str:
    what = {
        "Failed": "failed",
        "Stalled": "stalled",
        "Succeeded": "succeeded",
        STORM: "is in a restart storm",
    }[n.event]
    return f"Trainer {n.namespace}/{n.name} {what}"


def facts(n: Notice) -> list[tuple[str, str]]:
    rows = [("Namespace", n.namespace), ("Trainer", n.name), ("Phase", n.phase or "-"), ("Reason", n.reason or "-")]
    if n.event == STORM:
        rows.append(("Role", n.role))
    rows.append(("Time", n.time or "-"))
    return rows


def payload(n: Notice, fmt: str) -> dict[str, Any]:
    """The request body for a Slack incoming webhook, a Microsoft Teams workflow webhook (an
    Adaptive Card message) or any receiver of plain JSON."""
    title = headline(n)
    hint = f"kubectl describe trainer {n.name} -n {n.namespace}"
    if fmt == "slack":
        details = "\n".join(f"*{k}:* {v}" for k, v in facts(n))
        return {
            "text": f"{title}: {n.message}" if n.message else title,
            "blocks": [
                {"type": "header", "text": {"type": "plain_text", "text": title}},
                {"type": "section", "text": {"type": "mrkdwn", "text": n.message or n.reason or n.event}},
                {"type": "section", "text": {"type": "mrkdwn", "text": details}},
                {"type": "context", "elements": [{"type": "mrkdwn", "text": f"`{hint}`"}]},
            ],
        }
    if fmt == "teams":
        card = {
            "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
            "type": "AdaptiveCard",
            "version": "1.4",
            "body": [
                {
                    "type": "TextBlock",
                    "text": title,
                    "weight": "Bolder",
                    "size": "Medium",
                    "color": ADAPTIVE_COLORS[n.event],
                    "wrap": True,
                },
                {"type": "TextBlock", "text": n.message or n.reason or n.event, "wrap": True},
                {"type": "FactSet", "facts": [{"title": k, "value": v} for k, v in facts(n)]},
                {"type": "TextBlock", "text": hint, "fontType": "Monospace", "isSubtle": True, "wrap": True},
            ],
        }
        return {
            "type": "message",
            "summary": title,
            "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "content": card}],
        }
    body: dict[str, Any] = {
        "event": n.event,
        "trainer": {"namespace": n.namespace, "name": n.name},
        "phase": n.phase,
        "reason": n.reason,
        "message": n.message,
        "time": n.time,
        "summary": title,
    }
    if n.event == STORM:
        body["role"] = n.role
        body["restarts"] = n.restarts
    return body
