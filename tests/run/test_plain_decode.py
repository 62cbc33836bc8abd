"""K = 0 (arm.num_drafts=0): plain decode, one target token per forward, timed as the loop's steps."""
import numpy as np
import pytest

from atlas_ab import AtlasError
from atlas_ab.config.structured import ArmConfig, ModelConfig, RunnerConfig, WorkloadConfig, validate_run

TINY_WL = WorkloadConfig(n_docs=3, turns=2, chunk_tokens=12, gen_tokens=6)
SMALL = ModelConfig(name="gpu", path=None, init="random", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=96, vocab_size=4096)


def _wave(arm, i=0):
    from atlas_ab.run.runner import Runner

    r = Runner(arm, SMALL, TINY_WL, RunnerConfig(device="cpu", batch_width=2))
    return r, r.run_wave(i).steps.to_pandas()


def test_plain_decode_commits_the_speculative_text_one_token_a_step():
    r, plain = _wave(ArmConfig(name="k0", num_drafts=0))
    assert r.info.loop == "step_by_step" and r.info.fused is False
    # 2 documents x 2 turns x (G - 1 = 5) steps: the turn's prefill commits its first token
    assert len(plain) == 2 * 2 * 5
    assert (plain["k"] == 0).all() and (plain["accept_len"] == 0).all()
    assert plain["committed"].map(len).eq(1).all() and plain["drafts"].map(len).eq(0).all()
    # warm-up apart: each wave's first step is timed in warmup_ms, every other in step_ms
    assert plain["warmup_ms"].notna().sum() == 2 and plain["step_ms"].notna().sum() == len(plain) - 2
    # greedy verification is lossless: K=2 commits the same tokens at the same positions
    _, spec = _wave(ArmConfig(name="k2", num_drafts=2))
    toks = lambda s: {(d, t): np.concatenate(list(g.sort_values("step")["committed"]))  # noqa: E731
                      for (d, t), g in s.groupby(["doc_id", "turn"])}
    a, b = toks(plain), toks(spec)
    assert a.keys() == b.keys() and all(a[k].tolist() == b[k].tolist() for k in a)


def test_plain_decode_refuses_the_drafters_levers():
    with pytest.raises(AtlasError, match="num_drafts=0 is plain decode \\(no drafter\\): catchup has no effect"):
        validate_run(ArmConfig(num_drafts=0, catchup=True), SMALL, TINY_WL, RunnerConfig())
    with pytest.raises(AtlasError, match="timed live only"):
        validate_run(ArmConfig(num_drafts=0), SMALL, TINY_WL, RunnerConfig(mode="replay"))
    with pytest.raises(AtlasError, match="num_drafts=-1 is out of range \\[1, 8\\]"):
        validate_run(ArmConfig(num_drafts=-1), SMALL, TINY_WL, RunnerConfig())
