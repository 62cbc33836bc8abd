"""The family registry: every family the config accepts has a builder, and nothing else does."""
import pytest

from atlas_ab import AtlasError
from atlas_ab.config.structured import PROPOSERS, ArmConfig, validate_arm
from atlas_ab.proposers import registry


def test_every_family_has_a_builder_and_only_those():
    assert sorted(registry.BUILDERS) == sorted(PROPOSERS)


def test_unknown_family_is_one_line_before_any_model_loads():
    with pytest.raises(AtlasError, match=r"proposer='medusa' is not a drafter family; one of mtp, draft_model"):
        validate_arm(ArmConfig(name="x", proposer="medusa"))


def test_a_family_without_a_builder_is_named():
    t = registry.Target(ck=None, model=None, arm=ArmConfig(proposer="medusa"), device=None, dtype=None)
    with pytest.raises(AtlasError, match="no builder registered"):
        registry.build(t)
