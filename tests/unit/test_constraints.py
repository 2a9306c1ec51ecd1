"""constraints.txt names every third-party distribution of the environment the tests run in, at the
version installed (hack/constraints.py): what the release and the image pin is what was tested."""

import pytest

from hack import constraints


def test_the_test_environment_is_what_constraints_txt_pins() -> None:
    pins = constraints.parse(constraints.CONSTRAINTS.read_text())
    found = constraints.drift(pins, constraints.installed())
    assert not found, "run `.tox/ci/bin/python hack/constraints.py update`:\n" + "\n".join(found)


def test_kopf_is_pinned_to_the_minor_whose_internals_we_use() -> None:
    pins = constraints.parse(constraints.CONSTRAINTS.read_text())
    assert pins["kopf"].startswith("1.45.")


@pytest.mark.parametrize(
    ("pins", "have", "lines"),
    [
        ({"kopf": "1.45.2"}, {"kopf": "1.45.2"}, []),
        ({"kopf": "1.45.2"}, {"kopf": "1.45.3"}, ["kopf==1.45.3 is installed, constraints.txt pins 1.45.2"]),
        ({}, {"pyyaml": "6.0.4"}, ["pyyaml==6.0.4 is installed and not pinned"]),
        ({"boto3": "1.44.18", "kopf": "1.45.2"}, {"kopf": "1.45.2"}, []),  # a pin nobody installs is harmless
    ],
)
def test_drift_names_what_is_installed_and_not_pinned(
    pins: dict[str, str], have: dict[str, str], lines: list[str]
) -> None:
    assert constraints.drift(pins, have) == lines


@pytest.mark.parametrize(
    ("text", "pins"),
    [
        ("# comment\n\nPyYAML==6.0.4\n", {"pyyaml": "6.0.4"}),
        ("typing_extensions==4.16.0  # why\n", {"typing-extensions": "4.16.0"}),
        ("Zope.Interface==7.0\n", {"zope-interface": "7.0"}),
    ],
)
def test_parse_reads_pins_by_canonical_name(text: str, pins: dict[str, str]) -> None:
    assert constraints.parse(text) == pins


@pytest.mark.parametrize("text", ["kopf>=1.45\n", "kopf==\n"])
def test_parse_refuses_what_is_not_a_pin(text: str) -> None:
    with pytest.raises(ValueError, match="is not name==version"):
        constraints.parse(text)


def test_render_then_parse_gives_the_pins_back() -> None:
    pins = {"kopf": "1.45.2", "pyyaml": "6.0.4"}
    assert constraints.parse(constraints.render(pins)) == pins
