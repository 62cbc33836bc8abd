"""The runner core on CPU fp32: lossless for both proposers at B in {1, 8} and
K in {1, 2, 3}; one host read per step; telemetry in the contract."""
import pandas as pd
import pytest
import torch

from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.draft_model import DraftModelProposer
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.lossless_gate import check
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.telemetry.schema import TIMING_COLUMNS
from tests.helpers.replay_tools import WEIGHTLESS, proposer
from tests.helpers.steps import assert_steps_match
from tests.helpers.tiny import tiny_docs, tiny_draft, tiny_models

pytestmark = pytest.mark.float_sensitive

G = 8


@pytest.fixture(scope="module")
def models():
    return tiny_models()


def run(models, arm, docs, draft=None):
    trunk, mtp = models
    if arm.proposer in WEIGHTLESS:
        prop = proposer(models, arm)
    else:
        prop = DraftModelProposer(draft) if draft is not None else MTPProposer(trunk, mtp, arm.row_space, arm.refeed)
    return Wave(LiveTarget(trunk), prop, arm, docs, G).run()


@pytest.mark.parametrize("B", [1, 8])
@pytest.mark.parametrize("K", [1, 2, 3])
@pytest.mark.parametrize("family", ["mtp", "draft_model", "ngram", "suffix"])
def test_lossless_gate(models, B, K, family):
    docs = tiny_docs(n=B, turns=2, chunk=10)
    draft = tiny_draft(models[0]) if family == "draft_model" else None
    arm = ArmConfig(name=f"k{K}", proposer=family, num_drafts=K, **WEIGHTLESS.get(family, {}))
    trace = run(models, arm, docs, draft)
    gate = check(models[0], docs, trace.generated, G, list(range(B)))
    assert gate.passed and gate.divergences == 0 and gate.checked_tokens == B * 2 * G
    steps = trace.steps.table().to_pandas()
    # a weightless family drafts 0..K a row (k is the row's); the others K every step
    assert (steps.accept_len <= steps.k).all() and ((steps.k <= K) if family in WEIGHTLESS else (steps.k == K)).all()
    if family not in WEIGHTLESS or B > 1:       # one tiny random document repeats too little for a lookup
        assert steps.accept_len.max() >= 1, "the tiny drafter should get some drafts accepted"
    # every turn committed exactly G tokens: the prefill's one plus the steps'
    per_turn = steps.groupby(["doc_id", "turn"]).committed.apply(lambda c: sum(map(len, c)))
    assert (per_turn == G - 1).all()


def test_the_gate_catches_a_lossy_loop(models):
    docs = tiny_docs(n=2, turns=1, chunk=10)
    trace = run(models, ArmConfig(), docs)
    trace.generated[1][0][3] = (trace.generated[1][0][3] + 1) % 48   # a token the target would not emit
    gate = check(models[0], docs, trace.generated, G, [0, 1])
    assert not gate.passed and gate.first_divergence["doc_id"] == 1 and gate.first_divergence["token"] == 3


class HostReads(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts every way a tensor's values reach the host: `.item()`/`bool()`/`int()`/`float()`
    (all dispatch to aten._local_scalar_dense), `.tolist()`, `.numpy()` and `.cpu()` (patched:
    on a CPU tensor they are no dispatch at all). On the GPU each is a device sync."""

    def __init__(self, monkeypatch):
        super().__init__()
        self.reads = []
        for name in ("cpu", "tolist", "numpy"):
            real = getattr(torch.Tensor, name)

            def counted(t, *a, _real=real, _name=name, **k):
                self.reads.append(_name)
                return _real(t, *a, **k)
            monkeypatch.setattr(torch.Tensor, name, counted)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.reads.append("item")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mode", ["live", "replay"])
def test_one_host_read_per_step(models, monkeypatch, mode):
    """Accepted counts (and everything else the host needs) come back in one copy per step, and
    nothing else reads a device value (no .item(), no bool() of a tensor, no .tolist()), whether
    the target runs (live) or a stored trajectory stands in for it (replay)."""
    from atlas_ab.speculative.targets import ReplayTarget
    from atlas_ab.speculative.trajectory import EXTEND, greedy
    docs = tiny_docs(n=4, turns=1, chunk=10)
    arm = ArmConfig(num_drafts=2, fingerprints=False)
    target = ReplayTarget(greedy(models[0], docs, G, extend=EXTEND, keep_hiddens=True), "cpu") \
        if mode == "replay" else LiveTarget(models[0])
    counter = HostReads(monkeypatch)
    with counter:
        trace = Wave(target, MTPProposer(*models, arm.row_space, arm.refeed), arm, docs, G).run()
    steps = len(set(trace.steps.table().to_pandas().groupby(["turn", "step"]).groups))
    prefill_reads = 1
    # each read of the step is the one `.cpu()` whose `.numpy()` follows it
    assert counter.reads.count("item") == 0 and counter.reads.count("tolist") == 0
    assert counter.reads.count("cpu") == steps + prefill_reads


def test_the_host_read_counter_sees_a_sync():
    """The counter above can fail: an .item() or a bool() of a tensor is seen."""
    import pytest as _pytest
    mp = _pytest.MonkeyPatch()
    try:
        c = HostReads(mp)
        with c:
            x = torch.ones(3)
            x.sum().item()
            bool(x[0] > 0)
            x.tolist()
        assert c.reads == ["item", "item", "tolist"]
    finally:
        mp.undo()


def test_telemetry_columns(models):
    from atlas_ab.telemetry.schema import STEP_SCHEMA
    trace = run(models, ArmConfig(num_drafts=2), tiny_docs(n=2, turns=2, chunk=10))
    t = trace.steps.table()
    assert t.schema == STEP_SCHEMA
    df = t.to_pandas()
    assert (df.drafts.map(len) == 2).all() and (df.target.map(len) == df.k + 1).all()
    assert not df.duplicated(["doc_id", "turn", "step"]).any()
    # the committed tokens are the accepted drafts then the target's bonus
    for _, r in df.iterrows():
        a = r.accept_len
        assert list(r.committed) == list(r.target[:a + 1])[:len(r.committed)]
        assert list(r.drafts[:a]) == list(r.target[:a])


@pytest.mark.parametrize("arm", [ArmConfig(num_drafts=3, shadow_topk=3),
                                 ArmConfig(proposer="draft_model", num_drafts=3, shadow_topk=2),
                                 ArmConfig(catchup=True, refeed=True, oracle_p2=True, fingerprints=False),
                                 *[ArmConfig(proposer=f, num_drafts=3, **v) for f, v in WEIGHTLESS.items()]])
def test_static_shape_steps_match_dynamic_ones(models, arm):
    """The CUDA-graph path reads the whole KV capacity every step (static shapes);
    on the CPU it runs eagerly, and must give the very same steps."""
    trunk, mtp = models
    docs = tiny_docs(n=3, turns=2, chunk=10)
    out = []
    for graphs in (False, True):
        prop = (DraftModelProposer(tiny_draft(trunk)) if arm.proposer == "draft_model"
                else proposer(models, arm))
        out.append(Wave(LiveTarget(trunk, graphs), prop, arm, docs, G).run().steps.table())
    assert_steps_match(out[0], out[1], skip=TIMING_COLUMNS)


@pytest.mark.parametrize("arm", [ArmConfig(num_drafts=2), ArmConfig(catchup=True, refeed=True, num_drafts=3)],
                         ids=["baseline", "refeed"])
def test_one_target_and_proposer_serve_consecutive_waves(models, arm):
    """A run's waves share its target, its proposer and (at static shapes) their KV pools, the
    wave's state buffers and the step graphs: a wave after another gives exactly the rows it gives
    alone, though the pools still hold the last wave's rows."""
    from atlas_ab.telemetry.fingerprint import fingerprint_rows
    trunk, mtp = models
    first, second = tiny_docs(n=3, turns=2, chunk=10, seed=1), tiny_docs(n=3, turns=2, chunk=10, seed=2)
    cap = 80

    def wave(target, prop, docs):
        t = Wave(target, prop, arm, docs, G, fingerprint_rows=fingerprint_rows, capacity=cap).run()
        ev = t.events.table().to_pandas() if t.events is not None else None
        return t.steps.table().to_pandas().drop(columns=list(TIMING_COLUMNS)), ev

    shared_t, shared_p = LiveTarget(trunk, graphs=True), MTPProposer(trunk, mtp, arm.row_space, arm.refeed)
    wave(shared_t, shared_p, first)
    kv = shared_t.kv
    after, after_ev = wave(shared_t, shared_p, second)
    assert shared_t.kv is kv, "the second wave of the same shape reuses the pool"
    alone, alone_ev = wave(LiveTarget(trunk, graphs=True), MTPProposer(trunk, mtp, arm.row_space, arm.refeed), second)
    pd.testing.assert_frame_equal(after, alone, check_exact=True)
    if alone_ev is not None:
        pd.testing.assert_frame_equal(after_ev, alone_ev, check_exact=True)
