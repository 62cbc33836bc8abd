"""A tree arm under sampling through the loop (Wave, live, CPU fp32, tiny models): a linear tree's
sampled rows are the K-chain's with greedy drafts; a top-2 tree commits exactly G tokens a turn
whose PITs pass the distributional gate, reproducibly at any batch width; the config takes a sampled
tree arm live and refuses it, in one line naming the setting, with sampled drafts or in replay.
Statistical checks use fixed seeds; a lossless sampler fails the gate with probability 1e-3."""
import numpy as np
import pytest

from atlas_ab import AtlasError
from atlas_ab.config.structured import (
    ArmConfig,
    ModelConfig,
    RunnerConfig,
    SamplingConfig,
    WorkloadConfig,
    validate_run,
)
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative import pit_gate
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.sampling import plan_of
from atlas_ab.speculative.targets import LiveTarget
from tests.helpers.tiny import tiny_docs, tiny_models

pytestmark = pytest.mark.float_sensitive

G = 8
EXACT = ["doc_id", "turn", "step", "k", "accept_len", "seq", "position", "drafts", "target", "committed",
         "drafter_rows", "fed_rows"]
CLOSE = ["conf", "accept_prob", "pit"]      # floats: to 1e-5 (the tree mask's forward vs the causal one)


@pytest.fixture(scope="module")
def models():
    return tiny_models()


def run(models, arm, docs, temperature=1.0, seed=3, G=G):
    trunk, mtp = models
    plan = plan_of(arm, SamplingConfig(temperature=temperature, seed=seed))
    return Wave(LiveTarget(trunk), MTPProposer(trunk, mtp, arm.row_space, arm.refeed), arm, docs, G,
                sampling=plan).run()


def _lists(col):
    return col.map(lambda v: np.asarray(v).tolist()).tolist()


def test_linear_tree_is_the_greedy_draft_chain_row_for_row(models):
    """topk:1,1,1 (draft_policy unset: a tree's is greedy) against the K=3 chain with draft_policy
    greedy, same seed, at T=0.3 (where the tiny drafter reaches every accept length: 141 steps,
    accept_len 0 / 1 / 2 / 3 in 106 / 29 / 4 / 2): every discrete column equal, conf / accept_prob /
    pit / alpha1 to 1e-5 (measured: equal bit for bit on this CPU)."""
    docs = tiny_docs(n=8, turns=2, chunk=10)
    chain = run(models, ArmConfig(name="a", num_drafts=3, draft_policy="greedy"), docs, temperature=0.3, G=12)
    tree = run(models, ArmConfig(name="a", num_drafts=3, tree="topk:1,1,1"), docs, temperature=0.3, G=12)
    a, b = chain.steps.table().to_pandas(), tree.steps.table().to_pandas()
    assert len(a) == len(b) and set(a.accept_len) == {0, 1, 2, 3}
    for c in EXACT:
        assert _lists(a[c]) == _lists(b[c]), c
    for c in CLOSE:
        np.testing.assert_allclose(np.concatenate(a[c].tolist()).astype(float),
                                   np.concatenate(b[c].tolist()).astype(float), atol=1e-5, err_msg=c)
    np.testing.assert_allclose(a.alpha1, b.alpha1, atol=1e-5)
    assert chain.generated == tree.generated
    np.testing.assert_allclose(np.concatenate(chain.pit), np.concatenate(tree.pit), atol=1e-5)


def test_sampled_tree_arm_passes_the_pit_gate(models):
    """topk:2,1 at T=1, 64 documents: 1,024 PITs, KS p = 0.086 here (over 200 seeds of a 16-document
    wave the p-values were uniform: KS 0.27); every path of the tree occurs (paths 0 / 0-1 / 0-2 /
    0-1-3 / 0-2-4: 576 / 71 / 54 / 18 / 11 of 730 steps)."""
    docs = tiny_docs(n=64, turns=2, chunk=10)
    trace = run(models, ArmConfig(name="tree", num_drafts=2, tree="topk:2,1"), docs)
    steps = trace.steps.table().to_pandas()
    per_turn = steps.groupby(["doc_id", "turn"]).committed.apply(lambda c: sum(map(len, c)))
    assert (per_turn == G - 1).all() and all(len(g) == G for seq in trace.generated for g in seq)
    assert (steps.pit.map(len) == steps.committed.map(len)).all()
    assert (steps.tree_path.map(len) == steps.accept_len + 1).all()
    # every path occurs: rank-1 children accepted, and both leaves' bonus
    assert set(steps.tree_path.map(tuple)) == {(0,), (0, 1), (0, 2), (0, 1, 3), (0, 2, 4)}
    for r in steps.itertuples():
        assert list(r.committed) == list(r.target[:len(r.committed)])
        assert list(r.drafts[:r.accept_len]) == list(r.target[:r.accept_len])
        assert len(r.accept_prob) == 2 and 0 <= r.accept_prob[0] <= 1
    # alpha1: the root children's p mass, accept_prob at depth 1
    assert np.allclose(steps.alpha1, steps.accept_prob.map(lambda a: a[0]))
    u = np.concatenate(trace.pit)
    assert len(u) == len(docs) * 2 * G
    g = pit_gate.check(u, len(docs))
    assert g["passed"], g["ks"]


def test_sampled_tree_arm_is_reproducible_across_batch_widths(models):
    docs = tiny_docs(n=3, turns=2, chunk=10)
    arm = ArmConfig(name="tree", num_drafts=2, tree="topk:2,1")
    together = run(models, arm, docs).generated
    assert together == [run(models, arm, [d]).generated[0] for d in docs]
    assert run(models, arm, docs, seed=4).generated != together


def test_sampled_tree_arm_at_static_shapes_is_the_eager_arm(models):
    """The sampled tree step at the static full-capacity shapes a CUDA graph captures (graphs=True,
    run eagerly on the CPU): the eager arm's rows, discrete columns exactly, floats to 1e-5."""
    trunk, mtp = models
    docs = tiny_docs(n=3, turns=2, chunk=10)
    arm = ArmConfig(name="tree", num_drafts=2, tree="topk:2,1")
    plan = plan_of(arm, SamplingConfig(temperature=1.0, seed=3))
    ref = run(models, arm, docs).steps.table().to_pandas()
    got = Wave(LiveTarget(trunk, graphs=True), MTPProposer(trunk, mtp, arm.row_space, arm.refeed, graphs=True), arm,
               docs, G, sampling=plan).run().steps.table().to_pandas()
    assert len(got) == len(ref) and ref.accept_len.max() >= 1
    for c in EXACT + ["tree_path"]:
        assert _lists(got[c]) == _lists(ref[c]), c
    for c in CLOSE:
        np.testing.assert_allclose(np.concatenate(got[c].tolist()).astype(float),
                                   np.concatenate(ref[c].tolist()).astype(float), atol=1e-5, err_msg=c)


def test_one_host_read_per_sampled_tree_step(models, monkeypatch):
    """The sampled walk reads nothing back: one device->host copy per step (+ the turn prefill's
    drawn token), no .item(), no bool() of a tensor, no .tolist()."""
    from tests.speculative.test_loop import HostReads
    trunk, mtp = models
    docs = tiny_docs(n=4, turns=1, chunk=10)
    arm = ArmConfig(name="tree", num_drafts=2, tree="topk:2,1")
    plan = plan_of(arm, SamplingConfig(temperature=1.0, seed=3))
    wave = Wave(LiveTarget(trunk), MTPProposer(trunk, mtp, arm.row_space, arm.refeed), arm, docs, G, sampling=plan)
    counter = HostReads(monkeypatch)
    with counter:
        trace = wave.run()
    steps = len(set(trace.steps.table().to_pandas().groupby(["turn", "step"]).groups))
    assert counter.reads.count("item") == 0 and counter.reads.count("tolist") == 0
    assert counter.reads.count("cpu") == steps + 1


SAMPLED = WorkloadConfig(sampling=SamplingConfig(temperature=0.7))
LIVE, REPLAY = RunnerConfig(mode="live"), RunnerConfig(mode="replay", trajectories="runs/trajectories")


@pytest.mark.parametrize("policy", [None, "greedy"])
def test_config_takes_a_sampled_tree_arm_live(policy):
    arm = ArmConfig(name="tree_top2", tree="topk:2,1", draft_policy=policy)
    validate_run(arm, ModelConfig(), SAMPLED, LIVE)
    assert plan_of(arm, SAMPLED.sampling).policy == "greedy"


@pytest.mark.parametrize("arm, runner, names", [
    (ArmConfig(name="t", tree="topk:2,1", draft_policy="sampled"), LIVE, "draft_policy=sampled"),
    (ArmConfig(name="t", tree="topk:2,1", draft_temperature=1.5), LIVE, "draft_temperature"),
    (ArmConfig(name="t", tree="topk:2,1"), REPLAY, "runner.mode=replay"),
    (ArmConfig(name="t", tree="topk:2,1", draft_policy="greedy"), REPLAY, "runner.mode=replay"),
], ids=["sampled_drafts", "draft_temperature", "replay", "replay_greedy"])
def test_config_refuses_in_one_line_naming_the_setting(arm, runner, names):
    with pytest.raises(AtlasError) as e:
        validate_run(arm, ModelConfig(), SAMPLED, runner)
    msg = str(e.value)
    assert names in msg and "\n" not in msg and "arm 't'" in msg
