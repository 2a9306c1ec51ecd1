"""The audit controller's own flags (docs/controllers.md, docs/audit.md, docs/notifications.md)."""

from dataclasses import dataclass

from trainerop_common.config import flag

from .notices import EVENTS, FORMATS

ALL_EVENTS = tuple(sorted(EVENTS))  # as the flag's parser gives them


@dataclass(frozen=True)
class AuditConfig:
    retention_days: float = flag(0.0, "delete audit records older than this many days (0: keep)")
    retention_records: int = flag(0, "keep at most this many audit records per namespace (0: no limit)")
    retention_interval_seconds: float = flag(300.0, "how often retention runs")
    seal_seconds: float = flag(
        60.0,
        "how often the records written since the last seal are sealed (their hashes in a chain of seals that "
        "`python -m trainerop_audit.verify` checks); 0: never",
    )
    summary_delay_seconds: float = flag(
        30.0,
        "how long status.audit (the records' count and the latest) may lag the records, so that the actions of a "
        "few seconds cost one status write; notification marks are never held; 0: written with each record",
    )
    notify_url_file: str = flag(
        "",
        "a file holding the URL of the webhook to notify of Trainer events (mount it from a Secret; re-read when "
        "it changes); empty: no notifications",
    )
    notify_format: str = flag(
        "slack", "the webhook's payload: slack, teams (an Adaptive Card) or json", choices=FORMATS
    )
    notify_events: tuple[str, ...] = flag(
        ALL_EVENTS, f"events to notify, comma-separated: {','.join(ALL_EVENTS)} (empty: all)"
    )
    notify_restart_storm_failures: int = flag(3, "a role's failures in a row that make a restart storm")
    notify_max_age_seconds: float = flag(
        3600.0, "events older than this when first seen are not sent (a notifier turned on over old runs)"
    )

    def __post_init__(self) -> None:
        if not self.notify_events:  # an empty list means all, not none
            object.__setattr__(self, "notify_events", ALL_EVENTS)

    def problems(self) -> list[str]:
        out = []
        if self.retention_days < 0 or self.retention_records < 0:
            out.append("--retention-days and --retention-records must be 0 (no limit) or more")
        if self.summary_delay_seconds < 0:
            out.append("--summary-delay-seconds must be 0 (no delay) or more")
        if self.seal_seconds < 0:
            out.append("--seal-seconds must be 0 (no seals) or more")
        if self.retention_interval_seconds <= 0:
            out.append("--retention-interval-seconds must be more than 0")
        unknown = sorted(set(self.notify_events) - set(ALL_EVENTS))
        if unknown:
            out.append(f"unknown --notify-events {unknown}; choose from {','.join(ALL_EVENTS)}")
        if self.notify_restart_storm_failures < 1:
            out.append("--notify-restart-storm-failures must be at least 1")
        return out
