"""HEAD_FP8, KV_FP8 and HEAD_SHARDS on the shipped default model (proposers/draft_head.py, runtime/kv_fp8.py):
each arm's committed tokens are the baseline's; the FP8 head drafts the argmax of an independent float64
computation on the same E4M3 values; the sharded head drafts the unsharded argmax; the FP8 KV pool reads
back exactly the E4M3 rounding of what was written, and drafts as an fp32 pool rounding on write does."""
from pathlib import Path

import numpy as np
import pytest
import torch

from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.base import RowFeed
from atlas_ab.proposers.draft_head import DraftHead
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.run.session import summary_line
from atlas_ab.runtime import checkpoint, kernels
from atlas_ab.runtime.fp8 import E4M3, to_e4m3
from atlas_ab.runtime.kv import KVPool
from atlas_ab.runtime.kv_fp8 import Fp8KVPool
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.lossless_gate import check
from atlas_ab.speculative.targets import LiveTarget
from tests.helpers.fp8_ref import round_e4m3
from tests.helpers.tiny import tiny_docs

DEFAULT = Path(__file__).resolve().parents[2] / "atlas_ab" / "models" / "default"
B, T, K = 4, 24, 3
NEAR_TIE = 1e-4     # fp32 logits of one row by two summation orders (H = 256) differ by far less


@pytest.fixture(scope="module")
def ck():
    return checkpoint.load(DEFAULT, device="cpu", dtype=torch.float32)


@pytest.fixture(scope="module")
def outs(ck):
    """The MTP layer's outputs [R, 1, H] over 64 positions of 2 random contexts (teacher-forced)."""
    g = torch.Generator().manual_seed(5)
    toks = torch.randint(0, ck.args.vocab_size, (2, 33), generator=g)
    with torch.no_grad():
        h = ck.trunk.forward_train(toks)
        out = ck.mtp.forward_train(toks[:, 1:], h[:, :-1], embed=ck.trunk)
    return out.reshape(-1, 1, out.shape[-1])


def _margin(z):
    top2 = z.topk(2, dim=-1).values
    return top2[:, 0] - top2[:, 1]


def test_plain_head_is_the_head_before_the_levers(ck, outs):
    head = DraftHead(ck.mtp, ck.trunk.lm_head)
    conf, draft, _, _, z = head.outputs(outs, 0, fp32=True)
    ref = ck.mtp.logits(outs, ck.trunk.lm_head)[:, 0]
    assert head.numerics() is None and torch.equal(z, ref) and torch.equal(draft, ref.argmax(-1))


def test_fp8_head_drafts_the_argmax_of_an_independent_float64_product(ck, outs):
    head = DraftHead(ck.mtp, ck.trunk.lm_head, fp8=True)
    assert head.numerics() == {"head_shards": 1, "head_fp8": "emulated (cpu: no row-wise FP8 GEMM)"}
    conf, draft, _, _, z = head.outputs(outs, 0, fp32=True)
    with torch.no_grad():
        x = ck.mtp.shared_head.norm(outs)[:, 0].double().numpy()
    w = ck.trunk.lm_head.weight.detach().double().numpy()
    sx = (np.abs(x).max(-1) / 448).astype(np.float32).astype(np.float64)
    sw = (np.abs(w).max(-1) / 448).astype(np.float32).astype(np.float64)
    ref = (round_e4m3((x / sx[:, None]).astype(np.float32)) * sx[:, None]) @ \
        (round_e4m3((w / sw[:, None]).astype(np.float32)) * sw[:, None]).T
    assert np.abs(z.double().numpy() - ref).max() <= 1e-5 * np.abs(ref).max()
    clear = _margin(torch.from_numpy(ref)) > NEAR_TIE
    assert torch.equal(draft[clear], torch.from_numpy(ref.argmax(-1))[clear])
    p_ref = torch.softmax(torch.from_numpy(ref), -1).max(-1).values
    torch.testing.assert_close(conf.double(), p_ref, rtol=1e-5, atol=0)
    # the FP8 head is not the fp32 one: its logits moved (what HEAD_FP8's arm measures the cost of)
    assert not torch.equal(z, ck.mtp.logits(outs, ck.trunk.lm_head)[:, 0])


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("shards", [2, 4, 8])
def test_sharded_head_drafts_the_unsharded_argmax(ck, outs, shards, fp8):
    one = DraftHead(ck.mtp, ck.trunk.lm_head, fp8=fp8)
    many = DraftHead(ck.mtp, ck.trunk.lm_head, fp8=fp8, shards=shards)
    conf1, draft1, _, _, z1 = one.outputs(outs, 0, fp32=True)
    conf, draft, ids, p, z = many.outputs(outs, 4, fp32=True)
    clear = _margin(z1) > NEAR_TIE      # a shard's matmul may sum in another order than the full one's
    assert torch.equal(draft[clear], draft1[clear]) and torch.equal(ids[:, 0][clear], draft[clear])
    torch.testing.assert_close(z, z1, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(conf, conf1, rtol=2e-6, atol=0)
    assert many.numerics()["head_shards"] == shards


def test_a_head_shard_count_that_does_not_divide_the_vocabulary_is_refused(ck):
    from atlas_ab import AtlasError
    with pytest.raises(AtlasError, match="head_shards=3 does not divide the vocabulary"):
        DraftHead(ck.mtp, ck.trunk.lm_head, shards=3)


def test_fp8_pool_reads_back_the_e4m3_rounding_of_what_was_written():
    pool = Fp8KVPool(1, 2, 8, [5, 3])
    g = torch.Generator().manual_seed(0)
    k, v = torch.randn(2, 2, 2, 8, generator=g) * 40, torch.randn(2, 2, 2, 8, generator=g) * 1e-3
    k[0, 0, 0, 0] = 1000.0                                       # past 448: saturates
    slots = torch.tensor([[0, 3], [1, -1]])
    pool.write(0, slots, k, v)
    rk, rv = pool.read(0, 4)
    assert pool.k.dtype == torch.uint8 and rk.dtype == torch.float32
    assert torch.equal(rk[0, 0], torch.from_numpy(round_e4m3(k[0, 0].double().numpy())).float())
    assert torch.equal(rv[0, 3], torch.from_numpy(round_e4m3(v[0, 1].double().numpy())).float())
    assert rk[0, 0, 0, 0] == 448.0 and torch.equal(rk[1, 1], to_e4m3(k[1, 0]).float())
    assert (rk[0, 1] == 0).all() and (rk[0, 2] == 0).all()      # untouched slots read 0


class RoundingPool(KVPool):
    """The emulation: an fp32 pool that rounds each row through E4M3 on write."""

    def write(self, layer, slots, k, v, flat=None):
        super().write(layer, slots, to_e4m3(k).to(self.dtype), to_e4m3(v).to(self.dtype), flat)


def _propose(ck, prop, seed=7):
    g = torch.Generator().manual_seed(seed)
    toks = torch.randint(0, ck.args.vocab_size, (B, T), generator=g).to(ck.trunk.device)   # a CPU generator
    with torch.no_grad():
        h = ck.trunk.forward_train(toks)
        nxt = ck.trunk.logits(h[:, -1:])[:, 0].argmax(-1)
    prop.alloc(np.full(B, T + 16))
    seq, key = np.repeat(np.arange(B), T - 1), np.tile(np.arange(T - 1), B)
    prop.prefill_drafter(RowFeed(seq=seq, key=key, token=toks[:, 1:].cpu().numpy().reshape(-1),
                                 label=np.full(len(seq), -1), hiddens=h[:, :T - 1].reshape(-1, h.shape[-1])))
    return prop.propose(None, nxt, h[:, -1], np.full(B, T), K, np.ones(B, dtype=bool))


def _pair(ck):
    lay = ck.layout
    real = MTPProposer(ck.trunk, ck.mtp, "compact", False, handoff_norm=lay.handoff_norm,
                       recycle_norm=lay.recycle_norm, kv_fp8=True)
    emu = MTPProposer(ck.trunk, ck.mtp, "compact", False, handoff_norm=lay.handoff_norm,
                      recycle_norm=lay.recycle_norm)
    a = ck.mtp.args
    emu._new_kv = lambda caps: RoundingPool(1, a.num_key_value_heads, a.head_dim, caps, device=ck.mtp.device,
                                            dtype=ck.mtp.dtype)
    return real, emu


def test_fp8_kv_drafts_as_the_rounding_emulation_does(ck):
    real, emu = _pair(ck)
    pr, pe = _propose(ck, real), _propose(ck, emu)
    assert isinstance(real.kv, Fp8KVPool) and real.numerics() == {
        "kv_fp8": "float8_e4m3fn storage, scale 1, read as float32"}
    assert torch.equal(real.kv.k.view(E4M3).float(), emu.kv.k) and torch.equal(real.kv.v.view(E4M3).float(), emu.kv.v)
    assert torch.equal(pr.drafts, pe.drafts) and torch.equal(pr.conf, pe.conf)


def _wave(ck, arm, docs):
    lay = ck.layout
    prop = MTPProposer(ck.trunk, ck.mtp, arm.row_space, arm.refeed, handoff_norm=lay.handoff_norm,
                       recycle_norm=lay.recycle_norm, head_fp8=arm.head_fp8, kv_fp8=arm.kv_fp8,
                       head_shards=arm.head_shards)
    trace = Wave(LiveTarget(ck.trunk), prop, arm, docs, 12).run()
    gate = check(ck.trunk, docs, trace.generated, 12, list(range(len(docs))))
    assert gate.passed and gate.divergences == 0, arm.name
    return trace


ARMS = [ArmConfig(name="head_fp8", head_fp8=True), ArmConfig(name="kv_fp8", kv_fp8=True),
        ArmConfig(name="head_shards_4", head_shards=4),
        ArmConfig(name="all_three", head_fp8=True, kv_fp8=True, head_shards=8, catchup=True, refeed=True)]


@pytest.fixture(scope="module")
def baseline(ck):
    docs = tiny_docs(n=4, turns=2, chunk=16, vocab=ck.args.vocab_size)
    return docs, _wave(ck, ArmConfig(name="baseline"), docs)


@pytest.mark.parametrize("arm", ARMS, ids=lambda a: a.name)
def test_each_arm_commits_the_baselines_tokens(ck, baseline, arm):
    """Greedy verification is lossless whatever the draft: the committed tokens are the baseline's, and
    the lossless gate (the target's own greedy decode) passes."""
    docs, base = baseline
    trace = _wave(ck, arm, docs)
    assert len(trace.generated) == len(base.generated)
    for a, b in zip(trace.generated, base.generated):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_summary_line_says_emulated():
    m = {"arm": "head_fp8", "summary": {"n_steps": 3, "n_serial": 0}, "gate": {"passed": True},
         "model": {"drafter_numerics": {"head_shards": 1, "head_fp8": "emulated (cpu: no row-wise FP8 GEMM)"}}}
    assert summary_line(m).endswith("FP8 head emulated (cpu: no row-wise FP8 GEMM)")
    m["model"]["drafter_numerics"]["head_fp8"] = "scaled_mm"
    assert "FP8" not in summary_line(m)
    assert "FP8" not in summary_line({**m, "model": {}})


# GPU (bf16, the H200): the real FP8 head against its emulation on the same hiddens; the FP8 pool against
# the rounding pool. Bound for the head: |z_real - z_emu| <= 2^-8 |z| + 2^-9 S + 1e-3, S = sum_i |x_i w_i|
# (the dot product's terms, scaled): bf16 output rounding, plus the FP8 GEMM's accumulation, which on
# Hopper keeps fewer bits than fp32 (DeepSeek-V3's report, section 3.3.2: about 14 on H800), so its error
# scales with the terms' magnitude, not the result's. On the H200 (2026-12-03) the first bound,
# 2^-8 |z| + 1e-3, failed at a max |diff| of 0.033 (`S` of these rows is 14 median, 29 max on the CPU);
# this one was set from that failure and has not run on the GPU since. Drafts may differ only at rows
# whose emulated top-1 and top-2 are within twice the bound. The pool: E4M3 values are exact in bf16, so
# both pools read the same numbers and, on one attention path (torch), draft the same tokens.
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_fp8_head_matches_its_emulation_within_the_bound_and_fp8_kv_its_rounding():
    from atlas_ab.runtime.fp8 import quantize_rows, real_fp8_matmul
    g = checkpoint.load(DEFAULT, device="cuda", dtype=torch.bfloat16)
    toks = torch.randint(0, g.args.vocab_size, (4, 65), generator=torch.Generator().manual_seed(5)).cuda()
    with torch.no_grad():
        h = g.trunk.forward_train(toks)
        outs = g.mtp.forward_train(toks[:, 1:], h[:, :-1], embed=g.trunk).reshape(-1, 1, h.shape[-1])
        head = DraftHead(g.mtp, g.trunk.lm_head, fp8=True)
        if real_fp8_matmul(torch.device("cuda")):
            assert head.numerics()["head_fp8"] == "scaled_mm"
            _, d_real, _, _, z_real = head.outputs(outs, 0, fp32=True)
            head.real = False
            _, d_emu, _, _, z_emu = head.outputs(outs, 0, fp32=True)
            x_q, x_s = quantize_rows(head._normed(outs)[:, 0].float())
            S = (x_q.float().abs() @ head.w_q.float().abs().t()) * x_s[:, None] * head.w_s
            bound = 2.0 ** -8 * z_emu.abs() + 2.0 ** -9 * S + 1e-3
            assert ((z_real - z_emu).abs() <= bound).all(), float((z_real - z_emu).abs().max())
            near = _margin(z_emu) <= 2 * bound.gather(1, d_emu[:, None])[:, 0]
            assert not ((d_real != d_emu) & ~near).any()
        else:
            assert head.numerics()["head_fp8"].startswith("emulated")
    with kernels.use("torch"):
        real, emu = _pair(g)
        pr, pe = _propose(g, real), _propose(g, emu)
    assert torch.equal(pr.drafts, pe.drafts) and torch.equal(pr.conf, pe.conf)
