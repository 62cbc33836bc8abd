"""The lossless gate (lossless_gate.py): the teacher-forced check equals a target-only greedy replay;
fp32 arbitration of every divergence, passing a near-tie within what the run's dtype can resolve and
failing a clear margin; a bug injected into the loop fails the gate in bf16 as in fp32; the bf16 error bound holds."""
import copy

import numpy as np
import pytest
import torch

import atlas_ab.speculative.lossless_gate as gate_module
from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.lossless_gate import Arbiter, check, teacher_forced, trunk_in
from atlas_ab.speculative.precision import FORWARD_ERROR, UNIT_ROUNDOFF, NearTieBound, forward_error, resolution
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.speculative.trajectory import greedy
from tests.helpers.tiny import tiny_docs, tiny_models

pytestmark = pytest.mark.float_sensitive

G = 8


@pytest.fixture(scope="module")
def models():
    return tiny_models()


def test_static_replay_equals_the_dynamic_one(models):
    """graphs=True reads the whole KV every step (what a CUDA graph replays); on the CPU it runs
    eagerly and must give the very same tokens."""
    trunk, _ = models
    docs = tiny_docs(n=3, turns=2, chunk=10)
    a, b = greedy(trunk, docs, G, graphs=False), greedy(trunk, docs, G, graphs=True)
    assert np.array_equal(a.tokens, b.tokens) and np.allclose(a.margins, b.margins, atol=1e-5, equal_nan=True)


def test_teacher_forcing_a_greedy_text_finds_the_greedy_tokens(models, monkeypatch):
    """On target-only greedy text, the target's argmax given each committed prefix is the token
    greedy committed there (at every position, every turn), with the decode's margins; and the
    history interleaves every turn's context and generated tokens."""
    trunk, _ = models
    docs = tiny_docs(n=3, turns=2, chunk=10)
    traj = greedy(trunk, docs, G)
    gen = traj.generated()
    forced = teacher_forced(trunk, docs, gen, G, group=2)       # two forwards: a group of 2, then 1
    assert np.array_equal(forced.tokens, np.array(gen))
    # a token budget below two texts: one sequence a forward, the same answer
    monkeypatch.setattr("atlas_ab.speculative.lossless_gate.GATE_TOKENS", len(forced.history[0]) + 1)
    one = teacher_forced(trunk, docs, gen, G)
    assert np.array_equal(one.tokens, forced.tokens) and np.allclose(one.margins, forced.margins, atol=1e-5)
    at = traj.gen_start[:, :, None] - 1 + np.arange(G)                        # [S, turns, G]
    assert np.allclose(forced.margins, traj.margins[np.arange(3)[:, None, None], at, 0], atol=1e-4)
    for i, d in enumerate(docs):
        for t in range(2):
            s = forced.gen_start[i, t]
            assert list(forced.history[i][s - len(d.chunks[t]):s]) == d.chunks[t]
            assert list(forced.history[i][s:s + G]) == gen[i][t]


def test_the_bf16_error_bound_holds_on_the_tiny_model(models):
    """gate.FORWARD_ERROR bounds |bf16 logit - fp32 logit| / (u * m) here too (bench/bench_logit_error.py
    measures it on the shipped model and deeper trunks)."""
    trunk, _ = models
    toks = torch.as_tensor(np.array([d.chunks[0][:10] + d.chunks[1][:10] for d in tiny_docs(n=4, turns=2, chunk=10)]))
    r = forward_error(trunk, toks, torch.bfloat16)
    assert 0 < r["ratio"]["max"] < FORWARD_ERROR, r["ratio"]


def _dispute_at_first_token(trunk32, docs, gap):
    """A bf16 model in which, at doc 0's first generated token, some token b sits exactly `gap` (fp32)
    below the top-1 a; and the generated tokens of a loop that picked the other one of the two there
    (and decoded on greedily from it)."""
    t = copy.deepcopy(trunk32)
    ctx = torch.tensor([docs[0].chunks[0]])
    with torch.no_grad():
        hn = t.model.norm(t.forward_train(ctx))[0, -1]
        z = t.lm_head(hn)
        a, b = int(z.argmax()), int(z.argmin())
        t.lm_head.weight[b] = t.lm_head.weight[a] - gap * hn / hn.dot(hn)
    t16 = trunk_in(t, torch.bfloat16)
    gen = greedy(t16, docs, G).generated()
    picked = gen[0][0][0]
    assert picked in (a, b)
    gen[0] = _decode(t16, docs[0], {(0, 0): lambda z: b if picked == a else a})
    return t16, gen, (a, b)


@pytest.mark.parametrize("scale,passes", [(0.0, True), (0.25, True), (4.0, False)])
def test_a_divergence_is_arbitrated_in_fp32(models, scale, passes):
    trunk, _ = models
    docs = tiny_docs(n=2, turns=2, chunk=10)
    with torch.no_grad():
        z = trunk.logits(trunk.forward_train(torch.tensor([docs[0].chunks[0]])))[0, -1]
    gap = scale * resolution(torch.bfloat16, float(z.abs().max()))
    t16, gen, pair = _dispute_at_first_token(trunk, docs, gap)
    res = check(t16, docs, gen, G, [0, 1])
    assert res.passed is passes and res.divergences == res.arbitrated == len(res.arbitrations) >= 1
    rec = res.arbitrations[0]
    assert (rec["doc_id"], rec["turn"], rec["token"]) == (docs[0].doc_id, 0, 0)
    assert {rec["speculative"], rec["target_only"]} == set(pair) and rec["dtype"] == "bfloat16"
    assert abs(rec["fp32_margin"] - gap) < 0.1 * rec["bound"] + 1e-6         # the arbiter sees the built gap
    assert rec["verdict"] == ("near-tie" if passes else "clear margin")
    # any later divergence is one of bf16's own near-ties (a and b sit `gap` apart wherever a leads)
    assert all(r["verdict"] == "near-tie" for r in res.arbitrations[1:])
    assert res.near_ties == res.divergences - (not passes)
    assert res.first_divergence == rec
    if not passes:
        assert "fp32 margin" in rec["why"] and "bfloat16" in rec["why"]
    assert res.checked_tokens == 2 * 2 * G           # every token, past the divergence too


@pytest.mark.parametrize("room", [True, False])
def test_a_runs_arbiter_keeps_its_fp32_copy_only_with_room_for_it(models, monkeypatch, room):
    """The run's arbiter builds the fp32 copy once and reuses it in the next check where the device
    has room for it (`room_for`: a GPU keeping the copy's size free); else each check builds its
    own. The verdicts are the same either way."""
    trunk, _ = models
    docs = tiny_docs(n=2, turns=2, chunk=10)
    built = []
    monkeypatch.setattr(gate_module, "trunk_in", lambda t, d: built.append(trunk_in(t, d)) or built[-1])
    monkeypatch.setattr(Arbiter, "room_for", staticmethod(lambda t32: room))
    t16, gen, _ = _dispute_at_first_token(trunk, docs, 0.25 * resolution(torch.bfloat16, 1.0))
    arbiter = Arbiter(t16)
    first, second = (check(t16, docs, gen, G, [0, 1], arbiter) for _ in range(2))
    assert len(built) == (1 if room else 2) and (arbiter.kept is built[0]) == room
    assert first.to_dict() == second.to_dict() == check(t16, docs, gen, G, [0, 1]).to_dict()
    assert first.arbitrated >= 1


def test_off_a_gpu_or_in_fp32_the_arbiter_keeps_nothing(models):
    trunk, _ = models                                # fp32 on the CPU: the trunk is its own arbiter
    arbiter = Arbiter(trunk)
    assert arbiter.get() is trunk and arbiter.kept is None
    t16 = trunk_in(trunk, torch.bfloat16)
    assert not Arbiter.room_for(trunk_in(t16, torch.float32))       # a CPU copy is never kept
    assert Arbiter(t16).get() is not Arbiter(t16).get()


@pytest.mark.parametrize("turn,token", [(0, 0), (1, 3), (2, G - 1)])
def test_a_wrong_token_is_found_where_it_is(models, turn, token):
    """fp32, greedy text with one token replaced by the target's least likely one (and greedy from
    there on): the gate names that sequence, turn and token (the history of later turns carries the
    earlier turns' generated text), finds nothing else wrong, and checks every token."""
    trunk, _ = models
    docs = tiny_docs(n=3, turns=3, chunk=10)
    gen = greedy(trunk, docs, G).generated()
    forced = teacher_forced(trunk, docs, gen, G)
    assert np.array_equal(forced.tokens, np.array(gen))                 # greedy text passes everywhere
    with torch.no_grad():
        ctx = torch.as_tensor(forced.history[2][:forced.gen_start[2, turn] + token])[None]
        worst = int(trunk.logits(trunk.forward_train(ctx))[0, -1].argmin())
    gen[2] = _decode(trunk, docs[2], {(turn, token): lambda z: worst})     # greedy on from the wrong token
    res = check(trunk, docs, gen, G, [0, 1, 2])
    assert res.passed is False and res.divergences == 1
    d = res.first_divergence
    assert (d["doc_id"], d["turn"], d["token"], d["speculative"]) == (docs[2].doc_id, turn, token, worst)
    assert res.checked_tokens == 3 * 3 * G


def inject_lossy_commit(monkeypatch, at_step: int, seq: int = 1) -> None:
    """The bug: at one verify step of the loop, sequence `seq` commits the target's least likely
    token instead of its argmax (an off-by-one in the commit does the same kind of damage). It is
    injected into the host's commit, which runs every step also when the step is a CUDA graph."""
    from atlas_ab.speculative.loop import Wave

    orig, calls = Wave._commit, []

    def lossy_commit(self, h, vh, n, active):
        calls.append(1)
        if len(calls) == at_step:
            h.target[seq, 0] = int(self.target.trunk.logits(vh[seq:seq + 1, :1])[0, 0].argmin())
        return orig(self, h, vh, n, active)
    monkeypatch.setattr(Wave, "_commit", lossy_commit)


def _wave(models, dtype, docs, monkeypatch=None, inject_at=None):
    trunk, mtp = models
    trunk = trunk_in(trunk, dtype)
    mtp = copy.deepcopy(mtp).to(dtype).attach(trunk)
    if inject_at is not None:
        inject_lossy_commit(monkeypatch, inject_at)
    arm = ArmConfig(catchup=True, refeed=True)
    trace = Wave(LiveTarget(trunk), MTPProposer(trunk, mtp, arm.row_space, arm.refeed), arm, docs, G).run()
    return check(trunk, docs, trace.generated, G, list(range(len(docs))))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("inject", [False, True], ids=["clean", "off-by-one-token"])
def test_an_injected_loop_bug_fails_the_gate_and_a_clean_loop_passes(models, monkeypatch, dtype, inject):
    docs = tiny_docs(n=3, turns=2, chunk=10)
    res = _wave(models, dtype, docs, monkeypatch, inject_at=4 if inject else None)
    assert res.arbitrated == res.divergences == len(res.arbitrations)
    if not inject:
        assert res.passed, res.first_divergence
        if dtype == torch.float32:
            assert res.divergences == 0
        return
    assert res.passed is False
    d = res.first_divergence
    assert d["doc_id"] == docs[1].doc_id and d["verdict"] == "clear margin"
    # far outside what bf16 can blur: several times the bound (which allows 32 u*m since the
    # 5.7B-shape measurement on the H200; the tiny model's own error is below 5 u*m)
    assert d["fp32_margin"] > 5 * d["bound"]


def test_the_run_reports_the_divergence_that_failed_it():
    """Over shards, a failed shard's divergence is the one named, not an earlier near-tie."""
    from atlas_ab.run.store import aggregate_gate
    tie = {"doc_id": 0, "verdict": "near-tie"}
    bad = {"doc_id": 5, "verdict": "clear margin"}
    g = aggregate_gate([{"checked_sequences": 2, "divergences": 1, "arbitrated": 1, "passed": True,
                         "arbitrations": [tie], "first_divergence": tie},
                        {"checked_sequences": 2, "divergences": 1, "arbitrated": 1, "passed": False,
                         "arbitrations": [bad], "first_divergence": bad}])
    assert g["passed"] is False and g["first_divergence"] == bad and g["arbitrated"] == 2
    assert g["arbitrations"] == [tie, bad]


def _decode(trunk, doc, overrides: dict) -> list:
    """Target-only greedy text of `doc` ([turn] -> G tokens), one uncached forward per token, except
    at (turn, token) in `overrides`, which commits overrides[(turn, token)](logits) instead and
    decodes greedily on from the text so committed."""
    hist, gen = [], []
    for t, chunk in enumerate(doc.chunks):
        hist += list(chunk)
        gen.append([])
        for g in range(G):
            with torch.no_grad():
                z = trunk.logits(trunk.forward_train(torch.tensor([hist])))[0, -1]
            tok = overrides[(t, g)](z) if (t, g) in overrides else int(z.argmax())
            hist.append(tok)
            gen[t].append(tok)
    return gen


def test_two_near_ties_then_a_real_divergence_fail_at_the_third(models):
    """Teacher-forced all the way: past a near-tie the target's argmax given the committed text is
    as well defined as before, so the gate checks on. Sequence 0 commits the runner-up twice (both
    within the bound given), then the target's least likely token: the gate fails at the third,
    every generated token checked (it used to stop at the first and pass)."""
    trunk, _ = models
    docs = tiny_docs(n=2, turns=2, chunk=10)
    seen = {}

    def runner_up(key):
        def pick(z):
            top2 = z.topk(2)
            seen[key] = (float(top2.values[0] - top2.values[1]), float(z.abs().max()))
            return int(top2.indices[1])
        return pick

    def worst(z):
        seen[(1, 2)] = (float(z.max() - z.min()), float(z.abs().max()))
        return int(z.argmin())
    gen = [_decode(trunk, docs[0], {(0, 1): runner_up((0, 1)), (0, 4): runner_up((0, 4)), (1, 2): worst}),
           _decode(trunk, docs[1], {})]
    u = UNIT_ROUNDOFF[torch.float32]
    # a forward error that covers both runner-ups (bound = 2 E u m) and not the least likely token
    E = 1.01 * max(gap / (2 * u * m) for gap, m in (seen[(0, 1)], seen[(0, 4)]))
    gap3, m3 = seen[(1, 2)]
    assert gap3 > 1.1 * 2 * E * u * m3
    res = check(trunk, docs, gen, G, [0, 1], bound=NearTieBound(E, "given"))   # fp32: nothing else diverges
    assert res.checked_tokens == 2 * 2 * G
    verdicts = [(r["doc_id"], r["turn"], r["token"], r["verdict"]) for r in res.arbitrations]
    d0 = docs[0].doc_id
    assert verdicts == [(d0, 0, 1, "near-tie"), (d0, 0, 4, "near-tie"), (d0, 1, 2, "clear margin")], verdicts
    assert res.passed is False and res.near_ties == 2 and res.divergences == res.arbitrated == 3
    assert (res.first_divergence["turn"], res.first_divergence["token"]) == (1, 2)
