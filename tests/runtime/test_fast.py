"""The Triton forward (kernels/, the default on CUDA) equals the torch forward, model by model.

On the CPU it runs through Triton's interpreter (conftest), in fp32: the two paths differ only in
summation order (fused matmuls, flash-style softmax, the norms' sum of squares), so hiddens agree
to ~1e-5 and greedy tokens exactly. The fused weights are views of the HF-named parameters, so
state_dict round-trips, in-place updates and reloads keep working.
"""
from __future__ import annotations

import pytest
import torch

from atlas_ab.runtime import kernels
from atlas_ab.runtime.args import ModelArgs
from atlas_ab.runtime.model import MTPModule, Transformer, fused, init_weights
from atlas_ab.telemetry.schema import TIMING_COLUMNS

pytestmark = [pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed"),
              pytest.mark.float_sensitive]
DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
TOL = dict(atol=2e-5, rtol=2e-5)


def args(**kw):
    base = dict(vocab_size=61, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=12, num_nextn_predict_layers=1)
    return ModelArgs(**{**base, **kw})


def build(a: ModelArgs, seed=0):
    torch.manual_seed(seed)
    trunk, mtp = Transformer(a), MTPModule(a)
    init_weights(trunk, std=0.2)
    init_weights(mtp, std=0.2)
    for m in (trunk, mtp):          # biases and norm weights away from their inits, so they matter
        with torch.no_grad():
            for n, p in m.named_parameters():
                if n.endswith("bias") or "norm" in n:
                    p.add_(0.1 * torch.randn_like(p))
    return trunk.to(DEV).eval(), mtp.to(DEV).eval().attach(trunk)


# new tokens per sequence per call (the first is the prefill); 0 = the sequence idles
STEPS = [(5, 9, 3), (1, 3, 0), (2, 1, 1), (4, 2, 1)]


def run(trunk, backend, caps, steps, seed=1):
    """Feed the same ragged token stream with one backend; hiddens of the live rows, and the pool."""
    torch.manual_seed(seed)
    kv = trunk.new_kv(list(caps))
    n, out = [0] * len(caps), []
    with torch.no_grad(), kernels.use(backend):
        for step in steps:
            T = max(step)
            tok = torch.randint(0, trunk.args.vocab_size, (len(caps), T))
            slots = torch.full((len(caps), T), -1)
            for b, k in enumerate(step):
                slots[b, :k] = torch.arange(n[b], n[b] + k)
                n[b] += k
            pos = slots.clamp(min=0)
            h = trunk.forward(tok.to(DEV), pos.to(DEV), slots.to(DEV), kv, length=int(slots.max()) + 1)
            out.append([h[b, :k] for b, k in enumerate(step)])
    return out, kv, n


# llama_gqa (two layers, four ragged steps) in the fast tier, the other architectures in the whole suite;
# test_kernels.py's fast tests reach what they add (one query head per KV head, q/k norm, a window, bias)
@pytest.mark.parametrize("variant", ["llama_gqa", *(pytest.param(v, marks=pytest.mark.slow) for v in
                                                    ("mha", "qwen2_bias", "qwen3_qk_norm", "mistral_window"))])
def test_fast_forward_equals_torch(variant):
    a = {"llama_gqa": args(), "mha": args(num_key_value_heads=4, num_hidden_layers=1),
         "qwen2_bias": args(model_type="qwen2", attention_bias=True, num_hidden_layers=1),
         "qwen3_qk_norm": args(model_type="qwen3", qk_norm=True, head_dim=16, num_hidden_layers=1),
         "mistral_window": args(model_type="mistral", sliding_window=3, num_hidden_layers=1)}[variant]
    trunk, _ = build(a)
    caps = (20, 32, 12)
    steps = STEPS if variant == "llama_gqa" else STEPS[:2]
    ref, ref_kv, n = run(trunk, "torch", caps, steps)
    got, got_kv, _ = run(trunk, "triton", caps, steps)
    for r_step, g_step in zip(ref, got):
        for r, g in zip(r_step, g_step):
            torch.testing.assert_close(g, r, **TOL)
    for b, used in enumerate(n):                     # the live KV rows the fast path wrote
        s = slice(int(ref_kv.base[b]), int(ref_kv.base[b]) + used)
        torch.testing.assert_close(got_kv.k[:, s], ref_kv.k[:, s], **TOL)
        torch.testing.assert_close(got_kv.v[:, s], ref_kv.v[:, s], **TOL)


@pytest.mark.slow        # the model through the skinny Triton matmul; test_kernels.py checks the kernel fast
def test_fast_forward_with_skinny_matmuls_equals_torch():
    from atlas_ab.runtime.kernels.matmul import use_matmul
    trunk, _ = build(args())
    caps = (20, 32, 12)
    ref, _, _ = run(trunk, "torch", caps, STEPS[1:3])
    with use_matmul("triton"):
        got, _, _ = run(trunk, "triton", caps, STEPS[1:3])
    for r_step, g_step in zip(ref, got):
        for r, g in zip(r_step, g_step):
            torch.testing.assert_close(g, r, **TOL)


@pytest.mark.slow        # a greedy decode through Triton's interpreter; the per-forward tests above stay fast
def test_fast_greedy_tokens_and_logits_equal_torch():
    trunk, _ = build(args())
    prompt = torch.randint(0, 61, (2, 6), generator=torch.Generator().manual_seed(4)).to(DEV)

    def greedy(backend):
        with torch.no_grad(), kernels.use(backend):
            kv = trunk.new_kv([16, 16])
            pos = torch.arange(6, device=DEV).expand(2, 6)
            logits = trunk.logits(trunk.forward(prompt, pos, pos, kv, length=6))[:, -1]
            toks = [logits.argmax(-1)]
            for i in range(6, 12):
                p = torch.full((2, 1), i, device=DEV)
                toks.append(trunk.logits(trunk.forward(toks[-1][:, None], p, p, kv, length=i + 1))[:, 0].argmax(-1))
            return torch.stack(toks, 1), logits

    (ref, ref_logits), (got, got_logits) = greedy("torch"), greedy("triton")
    torch.testing.assert_close(got_logits, ref_logits, **TOL)
    assert torch.equal(got, ref)


@pytest.mark.parametrize("wiring", ["deepseek", "mimo"])
def test_fast_mtp_equals_torch(wiring):
    """Also MiMo's wiring (runtime/layouts.py): [hidden, embed] order, the embedding of the row
    at position zero_at zeroed."""
    trunk, mtp = build(args())
    if wiring == "mimo":
        mtp.hidden_first = mtp.zero_first_embed = True
    H = trunk.args.hidden_size
    g = torch.Generator().manual_seed(5)
    tok = torch.randint(0, 61, (3, 4), generator=g).to(DEV)
    hid = torch.randn(3, 4, H, generator=g).to(DEV)
    slots = torch.tensor([[0, 1, 2, 3], [0, 1, -1, -1], [0, 1, 2, -1]], device=DEV)
    rope = slots.clamp(min=0) + 7
    outs = {}
    for backend in ("torch", "triton"):
        kv = mtp.new_kv([6, 9, 5])
        with torch.no_grad(), kernels.use(backend):
            o1 = mtp.forward(tok, hid, rope, slots, kv, length=4, zero_at=8)
            o2 = mtp.forward(tok[:, :1], o1[:, :1], rope[:, :1] + 4, slots[:, :1] + 4, kv, length=5)
            outs[backend] = (o1, o2, mtp.logits(o2))
    live = slots >= 0
    torch.testing.assert_close(outs["triton"][0][live], outs["torch"][0][live], **TOL)
    for r, g_ in zip(outs["torch"][1:], outs["triton"][1:]):
        torch.testing.assert_close(g_, r, **TOL)


def test_logits_in_the_activation_dtype_are_the_fp32_logits_unrounded():
    """fp32=False (what an argmax or a greedy draft reads: runtime/kernels/top1.py) returns the head's
    output before its .float(): the same values, in the activation dtype (bf16 here)."""
    trunk, mtp = build(args())
    trunk, mtp = trunk.to(torch.bfloat16), mtp.to(torch.bfloat16)
    h = torch.randn(2, 3, trunk.args.hidden_size, generator=torch.Generator().manual_seed(6)).to(DEV, torch.bfloat16)
    with torch.no_grad():
        for f in (trunk.logits, lambda x, **kw: mtp.logits(x, trunk, **kw)):
            z32, z = f(h), f(h, fp32=False)
            assert z32.dtype == torch.float32 and z.dtype == torch.bfloat16
            assert torch.equal(z.float(), z32)


def test_fused_weights_are_the_parameters():
    """Fusing keeps the Parameter objects and HF names; the weights live once, in the fused
    tensor; in-place updates and load_state_dict show through; a replaced parameter refuses."""
    trunk, _ = build(args(num_hidden_layers=1))
    attn = trunk.model.layers[0].self_attn
    before = {k: v.clone() for k, v in trunk.state_dict().items()}
    params = {n: id(p) for n, p in trunk.named_parameters()}
    w = fused(attn, "_qkv_w", (attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight))
    assert w.shape[0] == attn.q_proj.weight.shape[0] + 2 * attn.k_proj.weight.shape[0]
    assert {n: id(p) for n, p in trunk.named_parameters()} == params
    after = trunk.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], v) for k, v in before.items())
    assert attn.k_proj.weight.data_ptr() == w[attn.q_proj.weight.shape[0]:].data_ptr()   # stored once
    with torch.no_grad():
        attn.v_proj.weight.mul_(2)                                     # in place: the fused tensor sees it
    assert torch.equal(w[-attn.v_proj.weight.shape[0]:], attn.v_proj.weight)
    sd = {k: torch.randn_like(v) for k, v in trunk.state_dict().items()}
    trunk.load_state_dict(sd)                                           # copy_: still the same storage
    assert fused(attn, "_qkv_w", (attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight)) is w
    assert torch.equal(w[:attn.q_proj.weight.shape[0]], sd["model.layers.0.self_attn.q_proj.weight"])
    attn.q_proj.weight = torch.nn.Parameter(torch.zeros_like(attn.q_proj.weight))   # replaced: rebuilt
    w2 = fused(attn, "_qkv_w", (attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight))
    assert w2 is not w and (w2[:attn.q_proj.weight.shape[0]] == 0).all()
    assert torch.equal(w2[attn.q_proj.weight.shape[0]:], w[attn.q_proj.weight.shape[0]:])


@pytest.mark.slow        # a whole wave twice through Triton's interpreter; the fast tier keeps the per-forward tests
def test_wave_with_fast_kernels_equals_torch_wave():
    """A whole runner wave (verify, MTP drafts, catch-up, re-feed, the oracle's snapshot/restore,
    the gate's check) gives the same steps on the Triton path as on the torch path, with the
    static full-capacity shapes that the CUDA graphs capture (graphs=True, run eagerly here)."""
    import pandas as pd

    from atlas_ab.config.structured import ArmConfig
    from atlas_ab.proposers.mtp_head import MTPProposer
    from atlas_ab.speculative.loop import Wave
    from atlas_ab.speculative.lossless_gate import check
    from atlas_ab.speculative.targets import LiveTarget
    from tests.helpers.tiny import tiny_docs, tiny_models

    trunk, mtp = tiny_models()
    trunk, mtp = trunk.to(DEV), mtp.to(DEV).attach(trunk)
    docs = tiny_docs(n=2, turns=2, chunk=8)
    arm = ArmConfig(num_drafts=2, catchup=True, refeed=True, oracle_p2=True, fingerprints=False)
    out = {}
    for backend in ("torch", "triton"):
        with kernels.use(backend):
            trace = Wave(LiveTarget(trunk, graphs=True), MTPProposer(trunk, mtp, arm.row_space, arm.refeed,
                                                                          graphs=True), arm, docs, 6).run()
            gate = check(trunk, docs, trace.generated, 6, [0, 1])
        assert gate.passed and gate.divergences == 0
        out[backend] = trace.steps.table().to_pandas().drop(columns=list(TIMING_COLUMNS))
    pd.testing.assert_frame_equal(out["triton"], out["torch"], check_exact=False, atol=1e-5)
