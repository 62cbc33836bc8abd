"""Ragged batching over the KVPool equals running each sequence alone; the slot rule is exact."""
import pytest
import torch

from atlas_ab.runtime import model as model_mod
from atlas_ab.runtime.args import ModelArgs
from atlas_ab.runtime.model import MTPModule, Transformer, init_weights

pytestmark = pytest.mark.float_sensitive

ARGS = ModelArgs(vocab_size=61, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=12, num_nextn_predict_layers=1)


def _trunk():
    torch.manual_seed(0)
    m = Transformer(ARGS)
    init_weights(m, std=0.2)
    return m.eval()


# new tokens per sequence per call (the first call is the prefill); 0 = the sequence idles
STEPS = [(5, 9, 3), (1, 3, 0), (2, 1, 1), (0, 4, 3), (4, 2, 1), (1, 1, 1)]


@pytest.mark.parametrize("fold", [64, 0, 10**6], ids=["fold_small", "fold_never", "fold_always"])
@pytest.mark.parametrize("caps", [(20, 32, 12), (24, 24, 24)], ids=["ragged_caps", "uniform_caps"])
def test_ragged_batch_equals_alone(caps, fold, monkeypatch):
    monkeypatch.setattr(model_mod, "FOLD_MAX_ROWS", fold)
    m = _trunk()
    torch.manual_seed(1)
    toks = [torch.randint(0, 61, (sum(s[b] for s in STEPS),)) for b in range(3)]
    # batched
    kv = m.new_kv(list(caps))
    n = [0, 0, 0]
    got = [[] for _ in range(3)]
    with torch.no_grad():
        for step in STEPS:
            T = max(step)
            tok = torch.randint(0, 61, (3, T))            # garbage in padding rows
            pos = torch.zeros(3, T, dtype=torch.long)
            slots = torch.full((3, T), -1, dtype=torch.long)
            for b, k in enumerate(step):
                tok[b, :k] = toks[b][n[b]:n[b] + k]
                pos[b, :k] = torch.arange(n[b], n[b] + k)
                slots[b, :k] = pos[b, :k]
            kv.check(slots)
            h = m.forward(tok, pos, slots, kv, length=int(slots.max()) + 1)
            assert torch.isfinite(h).all()                 # padding rows stay finite too
            for b, k in enumerate(step):
                got[b].append(h[b, :k])
                n[b] += k
        # alone
        for b in range(3):
            kv1 = m.new_kv([caps[b]])
            ref, i = [], 0
            for step in STEPS:
                k = step[b]
                if k == 0:
                    continue
                p = torch.arange(i, i + k)[None]
                ref.append(m.forward(toks[b][None, i:i + k], p, p, kv1)[0])
                i += k
            assert torch.allclose(torch.cat(got[b]), torch.cat(ref), atol=1e-5), b
            # and both equal the uncached causal pass
            full = m.forward_train(toks[b][None])[0]
            assert torch.allclose(torch.cat(ref), full, atol=1e-5)


def test_length_default_and_longer_read_are_harmless():
    m = _trunk()
    tok = torch.randint(0, 61, (2, 6))
    pos = torch.arange(6).expand(2, 6)
    with torch.no_grad():
        a = m.forward(tok, pos, pos, m.new_kv([8, 16]))             # length from slots (one sync)
        b = m.forward(tok, pos, pos, m.new_kv([8, 16]), length=16)  # read past seq 0's budget: masked
    assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("which", ["trunk", "mtp"])
def test_row_at_slot_s_sees_exactly_0_to_s(which):
    torch.manual_seed(2)
    trunk = _trunk()
    mtp = MTPModule(ARGS)
    init_weights(mtp, std=0.2)
    mtp.eval().attach(trunk)
    B, T, s = 2, 7, 4
    tok = torch.randint(0, 61, (B, T))
    hid = torch.randn(B, T, ARGS.hidden_size)
    pos = torch.arange(T).expand(B, T)
    model = trunk if which == "trunk" else mtp

    def run(kv, sl):
        if which == "trunk":
            return trunk.forward(tok[:, sl], pos[:, sl], pos[:, sl], kv, length=T)
        return mtp.forward(tok[:, sl], hid[:, sl], pos[:, sl], pos[:, sl], kv, length=T)

    with torch.no_grad():
        kv = model.new_kv([T, T])
        run(kv, slice(0, T))                       # fill slots 0..T-1
        base = run(kv, slice(s, s + 1))            # re-run row s (rewrites slot s identically)
        flat = kv.flat(torch.tensor([[s + 1], [s + 1]]))[:, 0]
        kv.k[:, flat] = 1e3
        kv.v[:, flat] = -1e3                       # garbage at slot s+1 ...
        after = run(kv, slice(s, s + 1))
        assert torch.equal(base, after)            # ... is invisible to the row at slot s (same kernel, same shape)
        flat = kv.flat(torch.tensor([[s - 1], [s - 1]]))[:, 0]
        kv.v[:, flat] = -1e3                       # while garbage at slot s-1 is seen
        assert not torch.allclose(base, run(kv, slice(s, s + 1)))


def test_snapshot_restore():
    m = _trunk()
    kv = m.new_kv([5, 7])
    kv.k.normal_()
    kv.v.normal_()
    k0, v0 = kv.k.clone(), kv.v.clone()
    snap = kv.snapshot(torch.tensor([3, -1]))
    kv.k.zero_()
    kv.v.zero_()
    kv.restore(snap)
    idx = kv.flat(torch.tensor([[3], [-1]]))[:, 0]
    assert torch.equal(kv.k[:, idx], k0[:, idx]) and torch.equal(kv.v[:, idx], v0[:, idx])


def test_forward_train_has_gradients():
    trunk = _trunk().train()
    mtp = MTPModule(ARGS).attach(trunk)
    tok = torch.randint(0, 61, (2, 9))
    h = trunk.forward_train(tok)
    out = mtp.forward_train(tok[:, 1:], h[:, :-1])
    loss = trunk.logits(h).logsumexp(-1).mean() + mtp.logits(out).logsumexp(-1).mean()
    loss.backward()
    assert trunk.model.layers[0].self_attn.q_proj.weight.grad is not None
    assert mtp.eh_proj.weight.grad is not None and mtp.self_attn.k_proj.weight.grad is not None
