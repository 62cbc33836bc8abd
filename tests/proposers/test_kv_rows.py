"""The KV-only row shortcut (the default `write_rows`) against PREFILL_FULL (the whole block, as a
propose runs it): the drafter's K/V rows are equal bit for bit, on the torch path (the CPU's, fp32)
and on the Triton path (here through its interpreter), for every architecture variant and MTP wiring;
and a wave's step rows are the same, arm by arm. The same kernels run on the same shapes up to the
write (`Attention.kv_rows`, `Attention.write_kv_fast`), so nothing but the skipped work differs."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.runtime import kernels
from atlas_ab.runtime.args import ModelArgs
from atlas_ab.runtime.model import MTPModule, Transformer, init_weights
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.telemetry.schema import TIMING_COLUMNS
from tests.helpers.tiny import tiny_docs, tiny_models

pytestmark = pytest.mark.float_sensitive

VARIANTS = {
    "llama_gqa": {},
    "mha": dict(num_key_value_heads=4),
    "qwen2_bias": dict(model_type="qwen2", attention_bias=True),
    "qwen3_qk_norm": dict(model_type="qwen3", qk_norm=True, head_dim=16),
}


def build(seed=0, device="cpu", dtype=torch.float32, **kw) -> MTPModule:
    a = ModelArgs(**{**dict(vocab_size=61, hidden_size=48, intermediate_size=80, num_hidden_layers=1,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=12, num_nextn_predict_layers=1),
                     **kw})
    torch.manual_seed(seed)
    trunk, mtp = Transformer(a), MTPModule(a)
    init_weights(trunk, std=0.2)
    init_weights(mtp, std=0.2)
    with torch.no_grad():          # biases and norm weights away from their inits, so they matter
        for n, p in mtp.named_parameters():
            if n.endswith("bias") or "norm" in n:
                p.add_(0.1 * torch.randn_like(p))
    trunk.to(device, dtype)
    return mtp.to(device, dtype).eval().attach(trunk.eval())


def pools(mtp: MTPModule, full: bool):
    """Two ragged batches of context rows (padding included) over a pool that already holds rows,
    written by the whole block (full) or the shortcut; the pool's K and V, every slot (dump slots too).
    On the drafter's device, in its dtype."""
    g = torch.Generator().manual_seed(5)
    H, dev = mtp.args.hidden_size, mtp.device
    kv = mtp.new_kv([9, 12, 7])
    with torch.no_grad():
        zero = torch.zeros(3, 1, dtype=torch.long, device=dev)
        mtp.forward(torch.tensor([[3], [4], [5]], device=dev), torch.randn(3, 1, H, generator=g).to(dev, mtp.dtype),
                    zero, zero, kv, length=1)      # a row each, there before the context rows
        for slots in (torch.tensor([[1, 2, 3, 4], [1, 2, -1, -1], [1, 2, 3, -1]]),
                      torch.tensor([[5, 6], [3, -1], [4, 5]])):
            tok = torch.randint(0, 61, slots.shape, generator=g).to(dev)
            hid = torch.randn(*slots.shape, H, generator=g).to(dev, mtp.dtype)
            slots = slots.to(dev)
            rope = slots.clamp(min=0) + 7
            if full:
                mtp.forward(tok, hid, rope, slots, kv, length=int(slots.max()) + 1, zero_at=8)
            else:
                mtp.write_kv_rows(tok, hid, rope, slots, kv, zero_at=8)
    return kv.k.clone(), kv.v.clone()


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("wiring", ["deepseek", "mimo"])
def test_kv_only_rows_are_the_full_blocks_bit_for_bit(variant, wiring):
    mtp = build(**VARIANTS[variant])
    if wiring == "mimo":          # [hidden, embed] order, the embedding of the row at position zero_at zeroed
        mtp.hidden_first = mtp.zero_first_embed = True
    with kernels.use("torch"):
        full, short = pools(mtp, True), pools(mtp, False)
    assert full[0].abs().sum() > 0
    for f, s in zip(full, short):
        assert torch.equal(f, s)


@pytest.mark.skipif(not kernels.triton_available(), reason="triton is not installed")
@pytest.mark.parametrize("variant", ["llama_gqa", "qwen3_qk_norm"])
def test_kv_only_rows_on_the_triton_path_are_its_full_blocks_bit_for_bit(variant):
    """The fast path's shortcut runs forward_fast's first kernels (norm, the fused qkv matmul, RoPE +
    write) on the same shapes: equal bit for bit (here the interpreter's fp32; on the GPU in bf16:
    tests/run/test_gpu_kv_rows.py)."""
    mtp = build(**VARIANTS[variant])
    with kernels.use("triton"):
        full, short = pools(mtp, True), pools(mtp, False)
    for f, s in zip(full, short):
        assert torch.equal(f, s)


ARMS = [ArmConfig(name="baseline"), ArmConfig(name="drafter_prefill_on", drafter_prefill=True),
        ArmConfig(name="refeed_on", catchup=True, refeed=True, num_drafts=3),
        ArmConfig(name="dense_prefill", row_space="dense", drafter_prefill=True, catchup=True)]


@pytest.mark.parametrize("arm", ARMS, ids=lambda a: a.name)
@pytest.mark.parametrize("graphs", [False, True], ids=["dynamic", "static"])
def test_a_waves_steps_are_the_same_with_the_shortcut_and_the_full_block(arm, graphs):
    """Context rows (turn prefills) and catch-up rows (inside the step) through either path: the same
    step rows, exactly (drafts, accept lengths, confidences, ring labels)."""
    trunk, mtp = tiny_models()
    docs = tiny_docs(n=4, turns=3, chunk=10)
    out = []
    for full in (True, False):
        prop = MTPProposer(trunk, mtp, arm.row_space, arm.refeed, prefill_full=full)
        t = Wave(LiveTarget(trunk, graphs), prop, arm, docs, 8).run()
        out.append(t.steps.table().to_pandas().drop(columns=list(TIMING_COLUMNS)))
    assert len(out[0]) > 0
    pd.testing.assert_frame_equal(out[0], out[1], check_exact=True)
