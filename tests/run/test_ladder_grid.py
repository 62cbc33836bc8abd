"""A ladder study's grid is refused whole, before any model loads (run/ladder_grid.py)."""
import pytest

from atlas_ab import AtlasError
from atlas_ab.config.structured import ArmConfig, ModelConfig, RunnerConfig, StudyConfig, WorkloadConfig
from atlas_ab.run.ladder_grid import HEADROOM, architecture, bytes_needed, check_grid
from tests.helpers.compose import Sections

L8B = ModelConfig(name="llama8b", path=None, init="random", hidden_size=4096, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=8, intermediate_size=11008, vocab_size=4096)


def _c(widths=(1, 4, 256), k_max=3, b=1, k=0, n_docs=256, waves=0):
    return Sections(ArmConfig(num_drafts=k), L8B,
                    WorkloadConfig(n_docs=n_docs, turns=2, chunk_tokens=64, gen_tokens=32),
                    RunnerConfig(batch_width=b, dtype="bfloat16"),
                    StudyConfig(name="ladder", kind="ladder", widths=list(widths), k_max=k_max, waves=waves))


def test_k_beyond_the_proposers_maximum_is_refused_by_name():
    with pytest.raises(AtlasError, match="k_max=9 is beyond the mtp proposer's maximum K=8 \\(arm.num_drafts\\)"):
        check_grid(_c(k_max=9), available=(1 << 40, "test"))


def test_a_job_outside_the_grid_and_a_width_wider_than_the_workload():
    with pytest.raises(AtlasError, match="outside the grid"):
        check_grid(_c(b=2), available=(1 << 40, "test"))
    with pytest.raises(AtlasError, match="batch width 256 is wider than workload.n_docs=16"):
        check_grid(_c(n_docs=16), available=(1 << 40, "test"))


def test_the_widest_width_that_fits_is_named():
    arch = architecture(L8B)
    reach = 2 * (64 + 32) + 3 + 2
    weights, per_seq = bytes_needed(arch, 256, 3, reach, 2)
    # memory for exactly 100 sequences (after the headroom): 100 fit, 256 do not
    free = int((weights + 100.5 * per_seq) * HEADROOM)
    with pytest.raises(AtlasError, match="batch width 256 needs .* the widest that fits is 100$"):
        check_grid(_c(), available=(free, "cuda:0 (test)"))
    check_grid(_c(widths=(1, 4, 100)), available=(free, "cuda:0 (test)"))
    # the 5.7B shape's weights alone: 2 x V x H + 33 layers + MTP projection, in bf16
    layer = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 11008
    assert weights == (2 * 4096 * 4096 + 33 * layer + 2 * 4096 * 4096) * 2


def test_waves_tie_the_documents_to_the_width():
    check_grid(_c(b=4, n_docs=4, waves=1), available=(1 << 40, "test"))
    with pytest.raises(AtlasError, match="study.waves=1 runs workload.n_docs = waves x batch width \\(4\\), but "
                                         "n_docs=16"):
        check_grid(_c(b=4, n_docs=16, waves=1), available=(1 << 40, "test"))


def test_the_study_file_sweeps_the_grid_it_declares():
    from hydra import compose, initialize_config_dir

    from atlas_ab.config.hydra_schema import CONF_DIR
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["+study=ladder_cpu", "study.widths=[1,2]", "study.k_max=2",
                                           "study.replicates=2"], return_hydra_config=True)
        pinned = compose("config", overrides=["+study=ladder_cpu", "study.widths=[1,2]", "study.k_max=2",
                                              "runner.batch_width=2", "arm.num_drafts=2"])
    # one sweep parameter: 2 widths x 3 K x 2 replicates = 12 jobs, each reading its cell from its slot
    assert dict(cfg.hydra.sweeper.params) == {"study.slot": ",".join(map(str, range(12)))}
    jobs = []
    for slot in range(12):
        cfg.study.slot = slot
        jobs.append((cfg.runner.batch_width, cfg.arm.num_drafts, cfg.study.replicate))
        assert cfg.workload.n_docs == 2 * cfg.runner.batch_width
        assert cfg.arm.name == f"k{jobs[-1][1]}_b{jobs[-1][0]}_r{jobs[-1][2]}"
    grid = {(b, k) for b in (1, 2) for k in range(3)}
    # replicate r is block r: every cell once, in a seeded order that is not the grid's own
    for r in (0, 1):
        block = jobs[6 * r:6 * r + 6]
        assert {(b, k) for b, k, rr in block} == grid and {rr for *_, rr in block} == {r}
    assert [(b, k) for b, k, _ in jobs[:6]] != sorted(grid)
    assert jobs[:6] != [(b, k, 0) for b, k, _ in jobs[6:]]          # each block its own draw
    assert pinned.workload.n_docs == 4 and pinned.arm.name == "k2_b2_r0"


def test_the_order_is_seeded_and_recorded():
    from atlas_ab.config.ladder_order import cell, order
    a, b = order([1, 4], 3, 3, seed=0), order([1, 4], 3, 3, seed=1)
    assert a == order([1, 4], 3, 3, seed=0) and a != b and sorted(a) == sorted(b)
    assert [cell(i, [1, 4], 3, 3, 0, "B") for i in range(len(a))] == [x[0] for x in a]
    assert [cell(i, [1, 4], 3, 3, 0, "r") for i in range(len(a))] == [0] * 8 + [1] * 8 + [2] * 8


def test_a_block_sweeps_one_replicate_alone():
    """study.block=r: replicate r's slots, so each replicate can run in its own process."""
    from atlas_ab.config.ladder_order import cell, slots
    assert slots([1, 4], 1, 3) == ",".join(map(str, range(12)))
    assert [slots([1, 4], 1, 3, block=r) for r in range(3)] == ["0,1,2,3", "4,5,6,7", "8,9,10,11"]
    assert {cell(int(i), [1, 4], 1, 3, 0, "r") for i in slots([1, 4], 1, 3, block=2).split(",")} == {2}
    for bad in (3, -1, True, "1"):
        with pytest.raises(ValueError, match=f"study.block={bad!r}: a replicate 0 .. 2 "):
            slots([1, 4], 1, 3, block=bad)


def test_a_replicate_count_below_one_is_refused():
    c = _c()
    c.study.replicates = 0
    with pytest.raises(AtlasError, match="study.replicates=0 must be >= 1"):
        check_grid(c, available=(1 << 40, "test"))
