"""`+study=families_ladder`: the K ladder's grid with a family in place of K (conf/study/families_ladder.yaml,
config/family_arms.py), each job's drafter read from its family's arm file, refused whole before any model loads."""
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from atlas_ab import AtlasError
from atlas_ab.config.family_arms import family_arm
from atlas_ab.config.hydra_schema import CONF_DIR
from atlas_ab.config.structured import ArmConfig, ModelConfig, RunnerConfig, StudyConfig, WorkloadConfig
from atlas_ab.run.ladder_grid import check_grid
from tests.helpers.compose import Sections

FAMS = ["plain", "ngram", "baseline", "eagle3"]


def _compose(*overrides):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=["+study=families_ladder", "study.widths=[1,2]",
                                            f"study.families=[{','.join(FAMS)}]", "study.replicates=2", *overrides],
                       return_hydra_config=True)


def test_the_sweep_covers_every_width_family_and_replicate_once():
    cfg = _compose()
    n = 2 * len(FAMS) * 2
    assert dict(cfg.hydra.sweeper.params) == {"study.slot": ",".join(map(str, range(n)))}
    assert cfg.study.k_max == len(FAMS) - 1 and cfg.workload.turns == 8
    jobs = []
    for slot in range(n):
        cfg.study.slot = slot
        b, fam, r = cfg.runner.batch_width, cfg.study.family, cfg.study.replicate
        jobs.append((b, fam, r))
        assert cfg.arm.name == f"{fam}_b{b}_r{r}" and cfg.workload.n_docs == 2 * b
        # the drafter is the family's arm file's, at study.family_k drafts (plain: none)
        assert cfg.arm.num_drafts == (0 if fam == "plain" else 2)
        assert cfg.arm.proposer == {"plain": "mtp", "ngram": "ngram", "baseline": "mtp", "eagle3": "eagle3"}[fam]
        assert (cfg.arm.catchup, cfg.arm.refeed, cfg.arm.drafter_prefill) == ((True,) * 3 if fam == "eagle3" else
                                                                              (False,) * 3)
    assert sorted(jobs) == sorted((b, f, r) for b in (1, 2) for f in FAMS for r in (0, 1))
    for r in (0, 1):              # replicate r is block r, every cell once, in its own seeded order
        assert {j[2] for j in jobs[8 * r:8 * r + 8]} == {r}
    assert [j[:2] for j in jobs[:8]] != [j[:2] for j in jobs[8:]]


def test_a_family_reads_only_the_drafter_levers_from_its_arm_file():
    assert family_arm("plain", "num_drafts", 3) == 0 and family_arm("suffix", "num_drafts", 3) == 3
    assert family_arm("plain", "proposer", 2) == ArmConfig().proposer
    assert family_arm("draft_model", "proposer", 2) == "draft_model"
    assert family_arm("eagle3", "drafter_prefill", 2) is True
    with pytest.raises(ValueError, match="study.families: 'nosuch' has no arm file"):
        family_arm("nosuch", "proposer", 2)
    # an arm file that sets another lever (here a confidence threshold) would time another drafter than its own
    with pytest.raises(ValueError, match="study.families: arm 'draft_conf_050' sets draft_conf; a family ladder "
                                         "takes only proposer, catchup, refeed, drafter_prefill"):
        family_arm("draft_conf_050", "proposer", 2)
    with pytest.raises(ValueError, match="atlas.family_arm: 'shift' is not one of num_drafts"):
        family_arm("ngram", "shift", 2)


def test_an_unknown_family_fails_the_composition_by_name():
    cfg = _compose("study.families=[plain,nosuch]")
    with pytest.raises(Exception, match="'nosuch' has no arm file"):
        for slot in range(8):       # the job whose family is nosuch fails as its arm resolves
            cfg.study.slot = slot
            OmegaConf.to_container(cfg.arm, resolve=True)


def _c(families=("plain", "ngram"), family="ngram", k_max=1, family_k=2):
    return Sections(ArmConfig(num_drafts=family_k), ModelConfig(),
                    WorkloadConfig(n_docs=2, turns=1, chunk_tokens=16, gen_tokens=8), RunnerConfig(batch_width=1),
                    StudyConfig(name="families_ladder", kind="ladder", widths=[1], k_max=k_max,
                                families=list(families), family=family, family_k=family_k, waves=2))


def test_the_family_grid_is_checked_whole():
    check_grid(_c(), available=(1 << 40, "test"))
    with pytest.raises(AtlasError, match="must name two families or more, each once"):
        check_grid(_c(families=("plain", "plain"), family="plain"), available=(1 << 40, "test"))
    with pytest.raises(AtlasError, match="k_max is the last index of study.families \\(1\\), got 3"):
        check_grid(_c(k_max=3), available=(1 << 40, "test"))
    with pytest.raises(AtlasError, match="study.family_k=9 is out of range \\[1, 8\\]"):
        check_grid(_c(family_k=9), available=(1 << 40, "test"))
    with pytest.raises(AtlasError, match="this job's family 'suffix' is not in study.families"):
        check_grid(_c(family="suffix"), available=(1 << 40, "test"))
