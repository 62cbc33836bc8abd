"""A tree arm through the loop (Wave, TREE lever): lossless on the tiny models and on the shipped
default model, its telemetry (k = the tree's depth, the accepted path per step), and a linear
"tree" (one child per depth) giving exactly the K-chain's rows."""
from pathlib import Path

import numpy as np
import pytest
import torch

from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.lossless_gate import check
from atlas_ab.speculative.targets import LiveTarget
from tests.helpers.tiny import tiny_docs, tiny_models

pytestmark = pytest.mark.float_sensitive

G = 8
SAME = ["doc_id", "turn", "step", "k", "accept_len", "seq", "position", "drafts", "target", "conf", "committed",
        "drafter_rows", "fed_rows"]


@pytest.fixture(scope="module")
def models():
    return tiny_models()


def run(models, arm, docs, G=G):
    trunk, mtp = models
    prop = MTPProposer(trunk, mtp, arm.row_space, arm.refeed)
    return Wave(LiveTarget(trunk), prop, arm, docs, G).run()


@pytest.mark.parametrize("B", [1, 8])
@pytest.mark.parametrize("tree, K", [("topk:2,1", 2), ("[(0,), (1,), (2,), (0, 0), (0, 1), (0, 0, 0)]", 3)])
def test_tree_arm_is_lossless(models, B, tree, K):
    docs = tiny_docs(n=B, turns=2, chunk=10)
    trace = run(models, ArmConfig(name="tree", tree=tree, num_drafts=K), docs)
    gate = check(models[0], docs, trace.generated, G, list(range(B)))
    assert gate.passed and gate.divergences == 0 and gate.checked_tokens == B * 2 * G
    steps = trace.steps.table().to_pandas()
    assert (steps.k == K).all() and (steps.accept_len <= K).all()
    assert steps.accept_len.max() >= 1
    assert (steps.tree_path.map(len) == steps.accept_len + 1).all() and (steps.tree_path.map(lambda p: p[0]) == 0).all()
    per_turn = steps.groupby(["doc_id", "turn"]).committed.apply(lambda c: sum(map(len, c)))
    assert (per_turn == G - 1).all()
    # the same text as the chain's (greedy is lossless for both)
    chain = run(models, ArmConfig(name="chain", num_drafts=K), docs)
    assert trace.generated == chain.generated


@pytest.mark.parametrize("row_space", ["compact", "dense"])
def test_linear_tree_is_the_chain_row_for_row(models, row_space):
    docs = tiny_docs(n=4, turns=2, chunk=10)
    K = 3
    chain = run(models, ArmConfig(name="a", num_drafts=K, row_space=row_space), docs, G=12)
    tree = run(models, ArmConfig(name="a", num_drafts=K, row_space=row_space, tree="topk:1,1,1"), docs, G=12)
    a, b = chain.steps.table().to_pandas(), tree.steps.table().to_pandas()
    assert len(a) == len(b)
    as_lists = lambda col: col.map(lambda v: np.asarray(v).tolist()).tolist()   # noqa: E731
    for c in SAME:
        assert as_lists(a[c]) == as_lists(b[c]), c
    assert a.tree_path.isna().all() and (b.tree_nodes == K).all()
    assert (b.tree_path.map(list) == b.accept_len.map(lambda x: list(range(x + 1)))).all()


@pytest.mark.slow
def test_tree_arm_on_the_default_model_commits_the_chains_text():
    from atlas_ab.config.structured import WorkloadConfig
    from atlas_ab.runtime import checkpoint
    from atlas_ab.workload.documents import build_workload
    path = Path(__file__).resolve().parents[2] / "atlas_ab" / "models" / "default"
    ck = checkpoint.load(path, device="cpu", dtype=torch.float32)
    wl = build_workload(WorkloadConfig(n_docs=2, turns=2, chunk_tokens=32, gen_tokens=24), path)
    runs = {}
    for arm in (ArmConfig(name="baseline"), ArmConfig(name="tree_top2", tree="topk:2,1")):
        runs[arm.name] = Wave(LiveTarget(ck.trunk), MTPProposer(ck.trunk, ck.mtp, "compact", False), arm, wl.docs,
                              wl.gen_tokens).run()
        gate = check(ck.trunk, wl.docs, runs[arm.name].generated, wl.gen_tokens, [0, 1])
        assert gate.passed and gate.divergences == 0
    assert runs["tree_top2"].generated == runs["baseline"].generated


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_tree_arm_at_static_shapes_is_the_eager_arm(models, backend):
    """The tree arm at the static full-capacity shapes a CUDA graph captures (graphs=True: run
    eagerly on the CPU), on the torch path and on the Triton path (its tree attention in the
    interpreter), gives the eager torch arm's steps: every discrete column exactly, conf to fp32."""
    from atlas_ab.runtime import kernels
    if backend == "triton" and not kernels.triton_available():
        pytest.skip("triton is not installed")
    trunk, mtp = models
    docs = tiny_docs(n=3, turns=2, chunk=10)
    arm = ArmConfig(name="tree", tree="topk:2,1", num_drafts=2)
    ref = run(models, arm, docs).steps.table().to_pandas()
    with kernels.use(backend):
        prop = MTPProposer(trunk, mtp, arm.row_space, arm.refeed, graphs=True)
        trace = Wave(LiveTarget(trunk, graphs=True), prop, arm, docs, G).run()
    got = trace.steps.table().to_pandas()
    assert len(got) == len(ref) and ref.accept_len.max() >= 1
    exact = [c for c in SAME if c != "conf"] + ["tree_path"]
    for c in exact:
        assert got[c].map(np.asarray).map(list).tolist() == ref[c].map(np.asarray).map(list).tolist() \
            if got[c].dtype == object else got[c].tolist() == ref[c].tolist(), c
    np.testing.assert_allclose(np.concatenate(got.conf.tolist()), np.concatenate(ref.conf.tolist()), atol=1e-5)
    gate = check(trunk, docs, trace.generated, G, list(range(3)))
    assert gate.passed and gate.divergences == 0


def test_a_later_wave_reads_the_first_waves_tree_arrays(models):
    """A run's later waves replay the step graphs its first wave captured, which read the tree's
    device arrays by address: every wave's step must hold the very same tensors (on the H200 a
    second wave with fresh ones read freed memory: an index out of bounds)."""
    from atlas_ab.proposers.mtp_tree import tree_arrays
    trunk, mtp = models
    arm = ArmConfig(name="tree", tree="topk:2,1", num_drafts=2)
    target = LiveTarget(trunk, graphs=True)
    prop = MTPProposer(trunk, mtp, arm.row_space, arm.refeed, graphs=True)
    waves = [Wave(target, prop, arm, tiny_docs(n=2, turns=1, chunk=8, seed=s), 4, capacity=64) for s in (1, 2)]
    one, two = (w.step for w in waves)
    assert all(one.tt[k] is two.tt[k] for k in one.tt)
    first = tree_arrays(one.tree, trunk.embed_tokens.weight.device if hasattr(trunk, "embed_tokens") else "cpu")
    assert tree_arrays(two.tree, first["row_of"].device) is first
