"""The training side's one wait between attempts of a call that failed for a reason another
attempt may not meet (S3's server errors and dropped connections, the API server's overload)."""


def backoff_seconds(attempt: int) -> float:
    """The wait after failed attempt ``attempt`` (0-based): 0.5, 1, 2, ... seconds."""
    return 0.5 * 2.0**attempt
