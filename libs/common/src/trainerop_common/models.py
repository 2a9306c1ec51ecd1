"""A model source's rules and the model initializer's report, as the controllers read them: they
live in trainerop_sdk.models, which the initializer (without the operator's library) reads too."""

from trainerop_sdk.models import (
    INIT_CONTAINER,
    S3_SCHEME,
    VERIFIED,
    HubSource,
    S3Source,
    SourceError,
    parse,
    read_termination,
    revision_dir,
)

__all__ = [
    "INIT_CONTAINER",
    "S3_SCHEME",
    "VERIFIED",
    "HubSource",
    "S3Source",
    "SourceError",
    "parse",
    "read_termination",
    "revision_dir",
]
