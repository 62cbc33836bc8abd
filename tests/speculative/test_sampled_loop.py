"""The loop under sampling (CPU fp32, tiny models): both proposers and both draft policies commit
exactly G tokens a turn whose PITs pass the distributional gate; a seed reproduces a run at any
batch width; replay commits the stored sampled trajectory; one host read per step; injected
sampler bugs fail the gate. Statistical checks use fixed seeds; a lossless sampler fails the
gate's KS test with probability ALPHA = 1e-3."""
import numpy as np
import pytest

from atlas_ab.config.structured import ArmConfig, SamplingConfig
from atlas_ab.speculative import pit_gate, sampling
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.replay_check import replay_gate
from atlas_ab.speculative.sampling import plan_of
from atlas_ab.speculative.targets import LiveTarget, ReplayTarget
from atlas_ab.speculative.trajectory import EXTEND, sampled
from tests.helpers.replay_tools import proposer
from tests.helpers.tiny import tiny_docs, tiny_draft, tiny_models
from tests.speculative.test_loop import HostReads

pytestmark = pytest.mark.float_sensitive

G = 8


@pytest.fixture(scope="module")
def models():
    return tiny_models()


@pytest.fixture(scope="module")
def draft(models):
    return tiny_draft(models[0])



def wave(models, arm, docs, target=None, draft=None, temperature=1.0, seed=3, gen=G, **kw):
    plan = plan_of(arm, SamplingConfig(temperature=temperature, seed=seed, **kw))
    return Wave(target or LiveTarget(models[0]), proposer(models, arm, draft), arm, docs, gen, sampling=plan).run()


ARMS = [ArmConfig(num_drafts=2), ArmConfig(num_drafts=3, draft_policy="greedy"),
        ArmConfig(num_drafts=2, catchup=True, refeed=True, draft_temperature=1.5),
        ArmConfig(proposer="draft_model", num_drafts=2), ArmConfig(proposer="draft_model", draft_policy="greedy")]


@pytest.mark.parametrize("arm", ARMS, ids=["mtp", "mtp_greedy_k3", "refeed_t15", "draft", "draft_greedy"])
def test_sampled_wave(models, draft, arm):
    docs = tiny_docs(n=8, turns=2, chunk=10)
    trace = wave(models, arm, docs, draft=draft, top_k=30, top_p=0.95)
    steps = trace.steps.table().to_pandas()
    # exactly G tokens per turn (the prefill's one + the steps'), each with its PIT
    per_turn = steps.groupby(["doc_id", "turn"]).committed.apply(lambda c: sum(map(len, c)))
    assert (per_turn == G - 1).all()
    assert (steps.pit.map(len) == steps.committed.map(len)).all()
    assert all(len(g) == G for seq in trace.generated for g in seq)
    # the output is the accepted drafts, then the recovered or bonus token
    for r in steps.itertuples():
        assert list(r.committed) == list(r.target[:len(r.committed)])
        assert list(r.drafts[:r.accept_len]) == list(r.target[:r.accept_len])
        assert len(r.accept_prob) == r.k and all(0 <= a <= 1 for a in r.accept_prob)
    assert 0 <= steps.alpha1.min() and steps.alpha1.max() <= 1
    if arm.draft_policy == "greedy":      # one-hot q: alpha_1 is the accept probability of the draft itself
        assert np.allclose(steps.alpha1, steps.accept_prob.map(lambda a: a[0]))
    u = np.concatenate(trace.pit)
    assert len(u) == len(docs) * 2 * G
    assert pit_gate.check(u, len(docs))["passed"]
    assert steps.accept_len.max() >= 1


def test_reproducible_across_batch_widths(models):
    """The committed text depends on the seed alone: one wave of 4 or four waves of 1."""
    docs = tiny_docs(n=4, turns=2, chunk=10)
    arm = ArmConfig(num_drafts=2, catchup=True, refeed=True)
    together = wave(models, arm, docs).generated
    alone = [wave(models, arm, [d]).generated[0] for d in docs]
    assert together == alone
    assert wave(models, arm, docs, seed=4).generated != together


@pytest.mark.parametrize("arm", [ArmConfig(num_drafts=2, catchup=True, refeed=True),
                                 ArmConfig(num_drafts=2, draft_policy="greedy")], ids=["sampled", "greedy"])
def test_replay_commits_the_stored_sampled_trajectory(models, arm):
    docs = tiny_docs(n=8, turns=2, chunk=10)
    plan = plan_of(arm, SamplingConfig(temperature=1.0, seed=3))
    traj = sampled(models[0], docs, G, plan.target, plan.seed, extend=EXTEND, keep_hiddens=True)
    trace = wave(models, arm, docs, target=ReplayTarget(traj, "cpu", logits=models[0].logits))
    assert replay_gate(traj, trace.generated)["passed"]
    steps = trace.steps.table().to_pandas()
    # replay knows the accept probability up to the first rejection, not past it
    known = steps.accept_prob.map(lambda a: sum(x is not None and not np.isnan(x) for x in a))
    assert (known == np.minimum(steps.accept_len + 1, steps.k)).all()
    assert pit_gate.check(np.concatenate(trace.pit), len(docs))["passed"]


@pytest.mark.parametrize("arm", [ArmConfig(num_drafts=2, catchup=True, refeed=True),
                                 ArmConfig(num_drafts=2, draft_policy="greedy")], ids=["sampled", "greedy"])
def test_a_sampled_replay_at_static_shapes_gives_the_dynamic_ones_steps(models, arm):
    """A GPU replay runs its steps at static shapes (`ReplayTarget(graphs=True)`: the coupled drafts'
    logits read the turn from the device); on the CPU that path runs eagerly and commits the same
    text with the same integer columns (the probabilities to fp32 rounding)."""
    from atlas_ab.telemetry.schema import TIMING_COLUMNS
    from tests.helpers.steps import assert_steps_match
    docs = tiny_docs(n=4, turns=2, chunk=10)
    plan = plan_of(arm, SamplingConfig(temperature=1.0, seed=3))
    traj = sampled(models[0], docs, G, plan.target, plan.seed, extend=EXTEND, keep_hiddens=True)
    out = [wave(models, arm, docs, target=ReplayTarget(traj, "cpu", logits=models[0].logits, graphs=g))
           for g in (False, True)]
    assert out[0].generated == out[1].generated
    assert_steps_match(*(t.steps.table() for t in out), skip=TIMING_COLUMNS)


@pytest.mark.parametrize("mode", ["live", "replay"])
def test_one_host_read_per_step(models, monkeypatch, mode):
    docs = tiny_docs(n=4, turns=1, chunk=10)
    arm = ArmConfig(num_drafts=2, fingerprints=False)
    plan = plan_of(arm, SamplingConfig(temperature=1.0, seed=3))
    target = LiveTarget(models[0]) if mode == "live" else ReplayTarget(
        sampled(models[0], docs, G, plan.target, plan.seed, extend=EXTEND, keep_hiddens=True), "cpu",
        logits=models[0].logits)
    counter = HostReads(monkeypatch)
    with counter:
        trace = Wave(target, proposer(models, arm), arm, docs, G, sampling=plan).run()
    steps = len(set(trace.steps.table().to_pandas().groupby(["turn", "step"]).groups))
    assert counter.reads.count("item") == 0 and counter.reads.count("tolist") == 0
    assert counter.reads.count("cpu") == steps + 1      # + the turn prefill's drawn token


def ignores_q(px, qx, u):
    return px >= u


def resamples_p(p, q, x):
    return p


@pytest.mark.parametrize("bug", ["ignores_q", "resamples_p"])
def test_the_gate_fails_a_lossy_sampler(models, monkeypatch, bug):
    """The same bugs the one-context chi-square test catches (test_sampling.py), in a wave: its
    PITs fail the KS test (measured p < 1e-8 for both on this wave)."""
    if bug == "ignores_q":
        monkeypatch.setattr(sampling, "_accept", ignores_q)
    else:
        monkeypatch.setattr(sampling, "_residual", resamples_p)
    docs = tiny_docs(n=32, turns=2, chunk=10)
    trace = wave(models, ArmConfig(num_drafts=2), docs, seed=1, gen=16)
    g = pit_gate.check(np.concatenate(trace.pit), len(docs))
    assert g["passed"] is False and g["ks"]["p_value"] < 1e-6


# ------------------------------------------------------------------ replay = live, in distribution
def _units(models, arm, plan, M=240, replay=False):
    """M independent runs of one turn: copies of two documents under distinct doc_ids (each its own
    uniforms), live or replayed over their stored target-only sampled trajectory. Per unit: the
    first step's accept length and the turn's number of steps (i.i.d. across units)."""
    from atlas_ab.workload.documents import Document
    base = tiny_docs(n=2, turns=1, chunk=10)
    docs = [Document(doc_id=i, name=f"copy{i}", chunks=base[i % 2].chunks) for i in range(M)]
    target = LiveTarget(models[0])
    if replay:
        traj = sampled(models[0], docs, G, plan.target, plan.seed, extend=EXTEND, keep_hiddens=True)
        target = ReplayTarget(traj, "cpu", logits=models[0].logits)
    steps = Wave(target, proposer(models, arm), arm, docs, G, sampling=plan).run().steps.table().to_pandas()
    return steps[steps.step == 0].set_index("doc_id").accept_len.sort_index(), steps.groupby("doc_id").size()


def _homogeneity(a, b):
    from scipy import stats
    vals = sorted(set(a) | set(b))
    return stats.chi2_contingency(np.array([[(a == v).sum() for v in vals], [(b == v).sum() for v in vals]])).pvalue


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["sampled", "greedy"])
def test_replay_equals_live_in_distribution(models, policy):
    """Two-sample chi-square tests (alpha 1e-3 each) of the first step's accept length and the
    turn's step count, live vs replay, over 240 independent units each; and a replay whose drafts
    ignore the trajectory (x ~ q, not coupled) is told apart by the same test."""
    arm = ArmConfig(num_drafts=2, catchup=True, refeed=True, fingerprints=False, draft_policy=policy)
    plan = plan_of(arm, SamplingConfig(temperature=1.0, seed=5))
    live, rep = _units(models, arm, plan), _units(models, arm, plan, replay=True)
    assert live[0].max() >= 1 and rep[0].max() >= 1
    assert _homogeneity(live[0], rep[0]) > 1e-3 and _homogeneity(live[1], rep[1]) > 1e-3
    if policy == "sampled":
        from atlas_ab.speculative.draws import CoupledDraws, LiveDraws
        mp = pytest.MonkeyPatch()
        mp.setattr(CoupledDraws, "draw", LiveDraws.draw)
        try:
            broken = _units(models, arm, plan, replay=True)
        finally:
            mp.undo()
        assert _homogeneity(live[0], broken[0]) < 1e-3
