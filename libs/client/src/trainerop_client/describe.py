"""``kubectl trainer describe``: one screen with each concern's part of a Trainer's status — the
sections and conditions each controller wrote, known from the API server's own record of who
owns which field (metadata.managedFields), then the latest Events (pure)."""

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

OPERATOR_MANAGER = "trainer-operator/"  # each controller applies status as trainer-operator/<concern>
MAX_VALUE = 100  # characters of one value shown
MAX_FIELDS = 12  # fields shown per section (the rest: `kubectl get trainer NAME -o yaml`)


def owners(trainer: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """Which concern wrote each status section, and each condition type."""
    sections: dict[str, str] = {}
    conditions: dict[str, str] = {}
    for entry in trainer["metadata"].get("managedFields") or ():
        manager = str(entry.get("manager") or "")
        if not manager.startswith(OPERATOR_MANAGER) or entry.get("subresource") != "status":
            continue
        concern = manager.removeprefix(OPERATOR_MANAGER)
        for key, owned in ((entry.get("fieldsV1") or {}).get("f:status") or {}).items():
            if key == "f:conditions":
                for item in owned:
                    if item.startswith("k:"):
                        conditions[str(json.loads(item[2:]).get("type"))] = concern
            elif key.startswith("f:"):
                sections[key[2:]] = concern
    return sections, conditions


def flat(value: Any, prefix: str = "") -> Iterator[str]:
    """``a.b=c`` for each leaf (lists shown whole, long values cut)."""
    if isinstance(value, Mapping) and value:
        for key, inner in value.items():
            yield from flat(inner, f"{prefix}.{key}" if prefix else str(key))
        return
    text = json.dumps(value) if isinstance(value, list | Mapping) else str(value)
    yield f"{prefix}={text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + '…'}"


def concern_lines(
    status: Mapping[str, Any], fields: Sequence[str], conditions: Sequence[Mapping[str, Any]]
) -> list[str]:
    out = []
    for section in fields:
        shown = list(flat(status[section], section))
        out += shown[:MAX_FIELDS] + ([f"… {len(shown) - MAX_FIELDS} more"] if len(shown) > MAX_FIELDS else [])
    for c in conditions:
        out.append(f"{c.get('type')}={c.get('status')} {c.get('reason', '')}: {c.get('message', '')}".rstrip(": "))
    return out


def describe(trainer: Mapping[str, Any], events: Sequence[Mapping[str, Any]] = ()) -> str:
    meta, status = trainer["metadata"], trainer.get("status") or {}
    sections, condition_owner = owners(trainer)
    conditions = status.get("conditions") or []
    concerns = sorted({*sections.values(), *condition_owner.values()}, key=lambda c: (c != "trainer", c))
    mine = {c: [s for s in status if sections.get(s) == c] for c in concerns}
    unowned = [s for s in status if s not in sections and s != "conditions"]
    lines = [
        f"Trainer {meta['namespace']}/{meta['name']}: {status.get('phase', 'Pending')}"
        + (f" ({status['reason']}: {status.get('message', '')})" if status.get("reason") else "")
    ]
    groups = [
        (c, concern_lines(status, mine[c], [x for x in conditions if condition_owner.get(x["type"]) == c]))
        for c in concerns
    ]
    if unowned:
        groups.append(("(no controller)", concern_lines(status, unowned, [])))
    if events:
        groups.append(("events", [event_line(e) for e in events[-10:]]))
    for i, (title, body) in enumerate(groups):
        last = i == len(groups) - 1
        lines.append(("└─ " if last else "├─ ") + title)
        lines += [("   " if last else "│  ") + text for text in body]
    return "\n".join(lines)


def event_line(event: Mapping[str, Any]) -> str:
    when = event.get("lastTimestamp") or event.get("eventTime") or ""
    return f"{when} {event.get('type', '')} {event.get('reason', '')}: {event.get('message', '')}"
