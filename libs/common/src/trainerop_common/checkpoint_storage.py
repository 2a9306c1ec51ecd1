"""Reading and deleting checkpoint data (I/O, blocking: call it from a worker thread), with the
same code the training pods write it with (re-exported from trainerop_sdk)."""

from trainerop_sdk.layout import MOUNT
from trainerop_sdk.s3 import S3Error
from trainerop_sdk.storage import Location, open_location

__all__ = ["MOUNT", "Location", "S3Error", "open_location"]
