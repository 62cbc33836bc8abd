"""Train an EAGLE-3 head (runtime/eagle3.py) on a frozen target, with the paper's training-time test.

    python -m atlas_ab.train eagle3 --target atlas_ab/models/default --out DIR [--preset default|gpu|tiny]

Each batch: random windows of the train split (python -m atlas_ab.train.data); the frozen target's
forward gives its features at `--layers` (default: a low, a middle and a high layer,
`eagle3_checkpoint.default_layers`) and its next-token distributions. The head is unrolled `--ttt`
steps over the window (EAGLE-3's training-time test, Li et al. 2025, sec. 3.2):

  step 0   row i = (token i+1, fc(features i)), causal over the window's rows
  step j   row i = (token i+1+j, the head's own step j-1 output at row i); it attends to step 0's rows
           up to i and to its own rows of steps 1..j (the diagonal): what draft j+1 sees at inference
           when its context rows are the target's (CATCHUP) and the chain's earlier drafts are its own

and step j at row i is trained to the target's distribution after position i+1+j (soft cross
entropy: the drafter is verified against the target, not the corpus), weighted 0.8^j. AdamW
(0.9, 0.95, wd 0.01), linear warm-up then cosine to 10% (train.lr_at), grad clip 1.0.
The head is saved in vLLM's eagle3 layout (runtime/eagle3_checkpoint.py) with training.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

PRESETS = {    # the default: a few CPU minutes; gpu: the 33.6M target on one H200
    "tiny": dict(steps=40, batch=4, seq_len=64, warmup=5, lr=3e-3),
    "default": dict(steps=300, batch=4, seq_len=128, warmup=20, lr=2e-3),
    "gpu": dict(steps=4000, batch=32, seq_len=1024, warmup=200, lr=1e-3),
}


def parse(argv=None):
    ap = argparse.ArgumentParser(prog="python -m atlas_ab.train eagle3",
                                 description="train an EAGLE-3 head on a frozen target (training-time test)")
    ap.add_argument("--target", default="atlas_ab/models/default", help="the target checkpoint directory")
    ap.add_argument("--out", required=True, help="the head's directory to write (vLLM's eagle3 layout)")
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS))
    ap.add_argument("--layers", help="feature layer ids, comma-separated (default: low, middle, high)")
    ap.add_argument("--ttt", type=int, default=3, help="training-time-test steps (drafts unrolled)")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--data", default=".carry/data", help="token arrays from python -m atlas_ab.train.data")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=0.0, help="stop after this many seconds (0 = off)")
    ap.add_argument("--log-every", type=int, default=20)
    a = ap.parse_args(argv)
    for k, v in PRESETS[a.preset].items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.ttt < 1:
        ap.error(f"--ttt={a.ttt} must be at least 1")
    return a


def head_args(target_args):
    """The head's shape: the target's, one plain Llama layer (no biases, no q/k norm)."""
    import dataclasses
    return dataclasses.replace(target_args, num_hidden_layers=1, num_nextn_predict_layers=0, model_type="llama",
                               attention_bias=False, o_bias=False, qk_norm=False, tie_word_embeddings=False,
                               sliding_window=None)


def _attend(attn, x, positions, keys, vals, theta: float):
    """The head's attention over its rows of every step so far: q of this step's rows x [B, T, 2H];
    keys/vals gain this step's; step 0's keys causally, later steps' on the diagonal only."""
    from atlas_ab.runtime.model import apply_rope, rope_cos_sin
    B, T = x.shape[:2]
    q = attn.q_proj(x).view(B, T, attn.n_heads, attn.head_dim)
    k = attn.k_proj(x).view(B, T, attn.n_kv_heads, attn.head_dim)
    v = attn.v_proj(x).view(B, T, attn.n_kv_heads, attn.head_dim)
    cos, sin = rope_cos_sin(positions, attn.head_dim, theta, x.dtype)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    keys.append(k)
    vals.append(v)
    i = torch.arange(T, device=x.device)
    blocks = [i[None, :] <= i[:, None]] + [torch.eye(T, dtype=torch.bool, device=x.device)] * (len(keys) - 1)
    mask = torch.cat(blocks, dim=1)                                               # [T, S*T]
    o = F.scaled_dot_product_attention(q.transpose(1, 2), torch.cat(keys, 1).transpose(1, 2),
                                       torch.cat(vals, 1).transpose(1, 2), attn_mask=mask, enable_gqa=True)
    return attn.o_proj(o.transpose(1, 2).reshape(B, T, attn.n_heads * attn.head_dim))


def unroll(head, embed, feats, tokens, ttt: int):
    """The training-time test: the head's logits [B, T, V] of steps 0..ttt-1, in turn. feats [B, T, n*H]:
    the target's features at positions 0..T-1; tokens [B, >= T+ttt]: the window (step j's row i reads
    token i+1+j)."""
    B, T = feats.shape[:2]
    m = head.midlayer
    hidden = head.combine(feats)
    keys, vals = [], []
    base = torch.arange(T, device=feats.device)
    for j in range(ttt):
        e = embed(tokens[:, 1 + j:1 + j + T])
        x = torch.cat([m.input_layernorm(e), m.hidden_norm(hidden)], dim=-1)
        r = hidden + _attend(m.self_attn, x, (base + j).expand(B, T), keys, vals, head.args.rope_theta)
        hidden = r + m.mlp(m.post_attention_layernorm(r))
        yield head.logits(hidden)


def ttt_losses(head, embed, feats, tokens, target_logp, ttt: int):
    """Per step j: the soft cross entropy of row i against the target's log-probs target_logp
    [B, >= T+ttt, V] after position i+1+j."""
    T = feats.shape[1]
    return [-(target_logp[:, 1 + j:1 + j + T].exp() * F.log_softmax(z.float(), -1)).sum(-1).mean()
            for j, z in enumerate(unroll(head, embed, feats, tokens, ttt))]


def accuracy(head, embed, feats, tokens, target_logp, ttt: int) -> list[float]:
    """Per step: the share of rows whose head argmax is the target's (teacher-forced, as the loss)."""
    T = feats.shape[1]
    return [float((z.argmax(-1) == target_logp[:, 1 + j:1 + j + T].argmax(-1)).float().mean())
            for j, z in enumerate(unroll(head, embed, feats, tokens, ttt))]


def train(trunk, head, data: np.ndarray, steps: int, batch: int, seq_len: int, warmup: int, lr: float, ttt: int,
          seed: int = 0, budget_s: float = 0.0, log=None, log_every: int = 20) -> dict:
    """Train `head` on the frozen `trunk` over random windows of `data` (token ids); returns a summary."""
    from atlas_ab.train.train import lr_at
    dev = next(head.parameters()).device
    trunk.eval().requires_grad_(False)
    head.train()
    embed = trunk.model.embed_tokens
    params = list(head.parameters())
    decay = [p for p in params if p.dim() >= 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(seed)
    src = torch.from_numpy(data.astype(np.int64))
    W = seq_len + ttt + 1
    t0, step, run, hist = time.time(), 0, [0.0] * ttt, []
    weights = [0.8 ** j for j in range(ttt)]
    amp = dev.type == "cuda"           # bf16 autocast on the GPU (as train.py), fp32 on the CPU
    probe = (5, 15)                    # steps timed for the budget: after the first calls' compiles and allocations
    t_probe = None
    while step < steps and not (budget_s and time.time() - t0 > budget_s):
        if budget_s and step in probe:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            if step == probe[0]:
                t_probe = time.time()
            else:                      # the schedule fitted to what is left of the budget at the probed speed
                dt = (time.time() - t_probe) / (probe[1] - probe[0])
                fit = step + int(0.9 * (budget_s - (time.time() - t0)) / dt)
                if fit < steps:
                    steps = max(fit, warmup + 1)
                if log is not None:
                    log(f"budget {budget_s:.0f}s at {dt * 1e3:.1f} ms/step: steps -> {steps}")
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup)
        starts = torch.randint(0, src.numel() - W, (batch,), generator=gen)
        w = src[starts[:, None] + torch.arange(W)].to(dev)                      # [B, T + ttt + 1]
        with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            h, feats = trunk.forward_train_features(w[:, :seq_len + ttt], head.layers)
            target_logp = F.log_softmax(trunk.logits(h).float(), dim=-1)            # [B, T+ttt, V]
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            losses = ttt_losses(head, embed, feats[:, :seq_len], w, target_logp, ttt)
        loss = sum(wt * x for wt, x in zip(weights, losses)) / sum(weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        run = [r + float(x.detach()) for r, x in zip(run, losses)]
        if log is not None and (step % log_every == 0 or step == steps):
            n = log_every if step % log_every == 0 else step % log_every
            log(f"step {step}/{steps} lr {g['lr']:.2e} loss/step " + " ".join(f"{r / n:.3f}" for r in run)
                + f" {time.time() - t0:.0f}s")
            hist.append({"step": step, "loss": [round(r / n, 4) for r in run]})
            run = [0.0] * ttt
    head.eval()
    return {"steps": step, "wall_s": round(time.time() - t0, 1), "history": hist}


def main(argv=None) -> dict:
    from atlas_ab.runtime import checkpoint, eagle3_checkpoint
    from atlas_ab.runtime.eagle3 import Eagle3Head
    from atlas_ab.runtime.model import init_weights
    from atlas_ab.train.data import load

    a = parse(argv)
    dev = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device)
    torch.manual_seed(a.seed)
    log = lambda s: print(f"[eagle3 {a.preset}] {s}", flush=True)  # noqa: E731
    ck = checkpoint.load(a.target, dev, torch.float32)
    L = ck.args.num_hidden_layers
    layers = [int(x) for x in a.layers.split(",")] if a.layers else eagle3_checkpoint.default_layers(L)
    bad = [i for i in layers if not 0 <= i <= L]
    if bad or layers != sorted(set(layers)):
        print(f"python -m atlas_ab.train eagle3: error: --layers={a.layers}: ids must be strictly increasing in "
              f"0..{L} (the target's {L} layers)", file=sys.stderr)
        raise SystemExit(2)
    meta, arrs = load(a.data)
    head = Eagle3Head(head_args(ck.args), layers, ck.args.hidden_size)
    init_weights(head)
    head.to(dev)
    log(f"target {a.target} ({L} layers, H {ck.args.hidden_size}), feature layers {layers}, head "
        f"{sum(p.numel() for p in head.parameters()) / 1e6:.2f}M params, ttt {a.ttt}, device {dev}")
    summary = train(ck.trunk, head, arrs["train"], a.steps, a.batch, a.seq_len, a.warmup, a.lr, a.ttt, a.seed,
                    a.budget_s, log, a.log_every)
    with torch.no_grad():       # held-out teacher-forced agreement with the target, per unrolled step
        src = torch.from_numpy(arrs["heldout"][:8 * (a.seq_len + a.ttt + 1)].astype(np.int64)).to(dev)
        w = src.view(8, -1)
        h, feats = ck.trunk.forward_train_features(w[:, :a.seq_len + a.ttt], head.layers)
        acc = accuracy(head, ck.trunk.model.embed_tokens, feats[:, :a.seq_len], w,
                       F.log_softmax(ck.trunk.logits(h).float(), -1), a.ttt)
    log("heldout teacher-forced agreement per step " + " ".join(f"{x:.3f}" for x in acc))
    training = {"preset": a.preset, "target": str(a.target), "target_hash": ck.hash, "layers": layers, "ttt": a.ttt,
                "batch": a.batch, "seq_len": a.seq_len, "lr": a.lr, "warmup": a.warmup, "seed": a.seed,
                **summary, "heldout_agreement": [round(x, 4) for x in acc],
                "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "torch": torch.__version__,
                "corpus": meta["corpus"], "command": "python -m atlas_ab.train eagle3 "
                + " ".join(sys.argv[2:] if argv is None else argv)}
    digest = eagle3_checkpoint.save(a.out, head, ck.args)
    (Path(a.out) / "training.json").write_text(json.dumps({**training, "checkpoint_hash": digest}, indent=1) + "\n")
    log(f"DONE {summary['steps']} steps, {summary['wall_s']}s -> {a.out} ({digest[:19]})")
    return training
