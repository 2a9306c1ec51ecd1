"""The pydantic models accept the seed YAML and what the API server accepts, nothing else."""

from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from trainerop_common.api import Trainer, TrainingProfile, kind_info
from trainerop_common.api.base import ResourceRequirements
from trainerop_common.quantity import parse_quantity

SEED = Path(__file__).resolve().parents[2] / "examples" / "seed"


def test_seed_trainer_parses_with_defaults() -> None:
    trainer = Trainer.model_validate(yaml.safe_load((SEED / "trainer.yaml").read_text()))
    assert trainer.spec.epochs == 10
    assert trainer.spec.topology.workers == 4
    assert trainer.spec.topology.parameter_servers == 1
    assert trainer.spec.framework == "generic"
    assert trainer.spec.run_policy.restart_policy is None  # OnFailure unless a profile says otherwise
    assert trainer.spec.checkpoint is not None
    assert trainer.spec.checkpoint.max_retention == 3


def test_seed_profile_parses() -> None:
    profile = TrainingProfile.model_validate(yaml.safe_load((SEED / "trainingprofile.yaml").read_text()))
    assert profile.spec.runtime_config is not None
    assert profile.spec.runtime_config.mount_path == "/etc/secrets"
    assert profile.spec.env_vars is not None
    assert profile.spec.env_vars[0].value == "22"


@pytest.mark.parametrize("path", sorted((SEED.parent).glob("*/*.yaml")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_example_parses_with_its_model(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        model = kind_info(doc["kind"]).model
        assert model.model_validate(doc).to_k8s()["spec"], path


def test_to_k8s_round_trips_camel_case() -> None:
    raw = yaml.safe_load((SEED / "trainer.yaml").read_text())
    dumped = Trainer.model_validate(raw).to_k8s()
    assert dumped["spec"]["topology"]["parameterServers"] == 1
    assert dumped["spec"]["checkpoint"]["intervalMinutes"] == 15


@pytest.mark.parametrize("value", ["500m", "40Gi", 8, "1e3", "0", "1.5", "+2"])
def test_valid_quantities(value: int | str) -> None:
    parsed = ResourceRequirements.model_validate({"requests": {"cpu": value}})
    assert parsed.requests == {"cpu": value}


@pytest.mark.parametrize("value", ["40GB", "-1", -2, "abc", "", "1.2.3"])
def test_invalid_quantities(value: int | str) -> None:
    with pytest.raises(ValidationError):
        ResourceRequirements.model_validate({"requests": {"cpu": value}})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Decimal("0.5")),
        ("40Gi", Decimal(40 * 2**30)),
        ("2k", Decimal(2000)),
        ("1e3", Decimal(1000)),
        (8, Decimal(8)),
        ("100n", Decimal("1e-7")),
        ("10Ei", Decimal(10 * 2**60)),  # a binary suffix that starts like an exponent
        ("2E", Decimal(2 * 10**18)),
        ("2E3", Decimal(2000)),
    ],
)
def test_parse_quantity(text: int | str, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


QUANTITY_FACTORS: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("0.001"),
    **{s: Decimal(1000) ** i for i, s in enumerate("kMGTPE", 1)},
    **{f"{s}i": Decimal(1024) ** i for i, s in enumerate("KMGTPE", 1)},
}


@given(st.integers(min_value=0, max_value=10**12), st.sampled_from(sorted(QUANTITY_FACTORS)))
def test_parse_quantity_scales_by_suffix(number: int, suffix: str) -> None:
    assert parse_quantity(f"{number}{suffix}") == number * QUANTITY_FACTORS[suffix]
