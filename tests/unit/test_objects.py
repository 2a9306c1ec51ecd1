"""What a DELETE's answer says (trainerop_common.objects.removed_at_once): the object gone already,
or a deletion still under way that the watch will finish."""

from typing import Any

import pytest

from trainerop_common.objects import removed_at_once

POD: dict[str, Any] = {"kind": "Pod", "metadata": {"name": "w-0", "uid": "u"}}


@pytest.mark.parametrize(
    ("answer", "removed"),
    [
        (POD, True),  # a Failed (or unscheduled) pod: the object as it was, removed at once
        ({**POD, "metadata": {**POD["metadata"], "deletionGracePeriodSeconds": 0}}, True),  # forced
        ({**POD, "metadata": {**POD["metadata"], "deletionGracePeriodSeconds": 30}}, False),  # its kubelet's turn
        ({**POD, "metadata": {**POD["metadata"], "finalizers": ["x/protect"]}}, False),  # a finalizer holds it
        ({"kind": "Status", "status": "Success"}, True),  # kinds that answer with a Status
        ({"kind": "Status", "status": "Failure"}, False),
        (None, False),  # no answer read (lightkube's path)
        ({"kind": "Pod"}, False),  # no metadata: nothing to judge by
    ],
)
def test_a_deletes_answer_says_whether_the_object_is_gone(answer: Any, removed: bool) -> None:
    assert removed_at_once(answer) is removed
