"""Where a pod spec names images (pure): one definition for the verify concern, which checks
every image a run's pods pull, and the trainer, which pins each to the digest that was checked
(docs/image-verification.md)."""

from collections.abc import Iterator, Mapping
from typing import Any

# (list field of a pod spec, the entry's field that holds a reference, the sub-object it is in)
IMAGE_FIELDS = (("containers", "image", None), ("initContainers", "image", None), ("volumes", "reference", "image"))
IMAGE_LISTS = tuple(field for field, _, _ in IMAGE_FIELDS)


def image_slots(pod_spec: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    """Each (object, key) whose value is an image reference: containers' and init containers'
    ``image``, image volumes' ``image.reference``."""
    for field, key, within in IMAGE_FIELDS:
        entries = pod_spec.get(field)
        for entry in entries if isinstance(entries, list) else ():
            holder = entry.get(within) if within and isinstance(entry, dict) else entry
            if isinstance(holder, dict) and isinstance(holder.get(key), str) and holder[key]:
                yield holder, key
