"""A family ladder's job takes its drafter from the family's own arm file (conf/arm/FAMILY.yaml), one
lever at a time through the `atlas.family_arm` resolver, so the composed config a manifest keeps is
the arm that ran and a family's levers live in one place (its arm file).

`plain` is plain decode (no drafter: num_drafts 0, run/plain.py). A family ladder carries only the
levers that choose and feed a drafter (FIELDS); an arm file that sets any other lever (a K, a
threshold, a tree) is refused by name, since the ladder would time a drafter other than the file's.
Every drafting family runs at study.family_k drafts, the same K for all.
"""
from __future__ import annotations

import functools

from omegaconf import OmegaConf

from atlas_ab.config.paths import CONF_DIR
from atlas_ab.config.structured import ArmConfig

#: the arm fields a family ladder takes from a family's arm file
FIELDS = ("proposer", "catchup", "refeed", "drafter_prefill")
PLAIN = "plain"


@functools.lru_cache(maxsize=None)
def _arm_file(family: str) -> dict:
    path = CONF_DIR / "arm" / f"{family}.yaml"
    if not path.is_file():
        raise ValueError(f"study.families: {family!r} has no arm file ({path}); a family is an arm name such as "
                         "baseline, ngram, suffix, eagle3, draft_model, or plain")
    data = OmegaConf.to_container(OmegaConf.load(path)) or {}
    extra = sorted(set(data) - {"name", *FIELDS})
    if extra:
        raise ValueError(f"study.families: arm {family!r} sets {', '.join(extra)}; a family ladder takes only "
                         f"{', '.join(FIELDS)} from a family's arm file (K is study.family_k for every family)")
    return data


def family_arm(family: str, field: str, k: int):
    """The value of arm.`field` for a job of `family` (num_drafts: 0 for plain, else k)."""
    if field == "num_drafts":
        return 0 if family == PLAIN else int(k)
    if field not in FIELDS:
        raise ValueError(f"atlas.family_arm: {field!r} is not one of num_drafts, {', '.join(FIELDS)}")
    default = getattr(ArmConfig(), field)
    return default if family == PLAIN else _arm_file(family).get(field, default)
