"""Prometheus metrics every controller exports (names follow Prometheus conventions;
docs/metrics.md maps them to the seed README's names)."""

from prometheus_client import Counter, Gauge, Histogram

RECONCILE_DURATION = Histogram(
    "operator_reconcile_duration_seconds",
    "Time one reconcile of one object took.",
    ["controller", "kind", "result"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
STATUS_WRITES = Counter(
    "operator_status_writes_total",
    "Status apply requests made (written) or avoided because nothing changed (skipped).",
    ["controller", "kind", "outcome"],
)
API_REQUESTS = Counter(
    "operator_api_requests_total",
    "API requests made by the controller's own client (kopf's watches excluded), by result code.",
    ["controller", "verb", "code"],
)
API_ERRORS = Counter(
    "operator_api_errors_total",
    "API requests of the controller's own client that failed, by HTTP status code or 'connection' "
    "(no answer: refused, reset, timed out).",
    ["controller", "verb", "code"],
)
QUEUE_DEPTH = Gauge(
    "operator_queue_depth",
    "Reconciles waiting to start: requeues and retries scheduled (backoff, deadlines, resync of one "
    "object) and reconciles waiting for another reconcile of the same object to finish.",
    ["controller"],
)
WATCHED = Gauge(
    "operator_watched_objects",
    "Objects of a kind the controller knows from its watch (a relist drops those deleted in a watch's gap).",
    ["controller", "kind"],
)
RECONCILES_IN_FLIGHT = Gauge("operator_reconciles_in_flight", "Reconciles running now.", ["controller"])
EVENTS_POSTED = Counter(
    "operator_events_total", "Kubernetes Events posted, by type and reason.", ["controller", "type", "reason"]
)
UP = Gauge("operator_up", "1 while the controller is connected and serving.", ["controller"])
ADMISSION_REVIEWS = Counter(
    "operator_admission_reviews_total",
    "Admission reviews of Trainers answered, by webhook and outcome (allowed, mutated, refused, error).",
    ["controller", "webhook", "outcome"],
)
ADMISSION_THROTTLED = Counter(
    "operator_admission_throttled_total",
    "Reviews refused with 429 before they were read: their caller had its budget of reviews or bytes in flight "
    "(docs/security.md).",
    ["webhook"],
)
UNAUTHENTICATED = Counter(
    "operator_admission_unauthenticated_total",
    "Reviews an observing webhook ignored: the caller presented no client certificate of the API server's "
    "(--webhook-client-ca-file).",
    ["webhook"],
)
ADMISSION_DURATION = Histogram(
    "operator_admission_duration_seconds",
    "Time one admission review took (the API server waits at most the webhook's timeoutSeconds).",
    ["controller", "webhook"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
