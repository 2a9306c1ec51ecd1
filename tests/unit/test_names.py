"""Names the operator builds from users' names are valid for every legal input (properties)."""

import re
from typing import get_args

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from trainerop_audit.decide import created_name
from trainerop_audit.record import record_name
from trainerop_checkpoint.pvc_pods import Target, pod_name
from trainerop_common.api.audit import AuditAction
from trainerop_common.names import child_name
from trainerop_sdk.names import DNS_SUBDOMAIN, MAX_NAME

VALID = re.compile(DNS_SUBDOMAIN)
LABEL = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
# Every legal object name: DNS labels joined by dots, at most 253 characters.
NAMES = st.lists(LABEL, min_size=1, max_size=8).map(".".join).filter(lambda n: len(n) <= MAX_NAME)


def valid(name: str, limit: int = MAX_NAME) -> bool:
    return len(name) <= limit and VALID.match(name) is not None


@given(NAMES, st.sampled_from(get_args(AuditAction)), st.text(max_size=20))
@example("a" * 199 + "." + "b" * 53, "Updated", "uid")
def test_an_audit_record_of_any_object_has_a_valid_name(name: str, action: str, key: str) -> None:
    assert valid(record_name(name, action, key))


def test_a_profile_name_cut_at_a_dot_still_makes_a_record_name() -> None:
    # 200 characters of name end on "."; the record's name must not hold ".-" (the API server refuses it).
    name = "a" * 199 + "." + "b" * 53
    assert valid(record_name(name, "Updated", "uid"))


@given(NAMES, st.uuids())
def test_a_creation_record_has_a_valid_name(name: str, uid: object) -> None:
    assert valid(created_name(name, str(uid)))


@given(NAMES, st.sampled_from(["verify", "collect"]), st.text(max_size=50))
def test_a_storage_pod_has_a_valid_name(owner: str, purpose: str, request: str) -> None:
    assert valid(pod_name(owner, purpose, "uid", request, Target("ns", "t", "claim", "image")), 63)


@pytest.mark.parametrize(
    ("base", "suffix", "limit", "name"),
    [
        ("train", ("created", "ab12"), 253, "train-created-ab12"),
        ("a.b", ("x",), 4, "a-x"),  # cut at the dot: the dot goes too
        ("a-bc", ("x",), 4, "a-x"),  # cut after a dash: the dash goes too
        ("abc", ("x",), 5, "abc-x"),
    ],
)
def test_child_names_are_cut_before_their_suffix(base: str, suffix: tuple[str, ...], limit: int, name: str) -> None:
    assert child_name(base, *suffix, limit=limit) == name


@pytest.mark.parametrize("suffix", ["Created", "a.b", "-x", ""])
def test_a_suffix_must_be_a_dns_label(suffix: str) -> None:
    with pytest.raises(ValueError, match="is not a DNS label"):
        child_name("base", suffix)
