"""The verify controller's metrics (docs/metrics.md)."""

from prometheus_client import Counter, Histogram

# result: accepted (a signature holds for every governing policy), refused (one does not),
# unreachable (the registry did not answer), cached (accepted before: no request).
IMAGE_CHECKS = Counter(
    "verify_image_checks_total", "Images checked against their ImagePolicies, by result.", ["result"]
)
REGISTRY_SECONDS = Histogram(
    "verify_registry_request_seconds",
    "One request to a registry (a tag's digest, a signature manifest, a payload), by what it read.",
    ["read"],  # digest|signatures|payload
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
