"""Teacher-forced held-out sanity check of a target + MTP pair (a proxy, not the harness's table).

    python -m atlas_ab.train.tf_eval --ckpt atlas_ab/models/default [--data .carry/data]

On fixed windows of held-out text (true tokens as input everywhere):
  main_acc    target top-1 == next true token
  p1          draft 1 = MTP(token i+1, TRUE trunk hidden i), top-1 (predicts token i+2)
  p2          draft 2 = MTP(token i+2, the MTP's OWN output for draft 1), chained. In this
              parallel pass every context row of draft 2 also carries a drafter hidden, which is
              harsher than real decoding (there only the rows of accepted drafts do).
  p2_cond     P(draft 2 right | draft 1 right)
  oracle_p2_cond  the same with the TRUE trunk hidden i+1 fed to draft 2 instead
Each is reported against the true text (`*_text`) and against the target's own greedy
prediction at that position (`*_agree`; acceptance under greedy verification is agreement).
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import torch
import torch.nn.functional as F


def heldout_windows(arr: np.ndarray, n: int, length: int) -> torch.Tensor:
    """n evenly spaced windows of `length` tokens (deterministic)."""
    if arr.size < length + 1:
        raise ValueError(f"held-out array has {arr.size} tokens, fewer than one window of {length}")
    starts = np.linspace(0, arr.size - length - 1, n).astype(np.int64)
    return torch.from_numpy(np.stack([arr[s:s + length].astype(np.int64) for s in starts]))


@torch.no_grad()
def evaluate(trunk, mtp, windows: torch.Tensor, batch: int = 8, autocast_dtype=None) -> dict:
    """Losses and teacher-forced accuracies over `windows` [N, T] (T >= 4)."""
    dev = trunk.device
    tot: dict[str, float] = {}
    cnt: dict[str, float] = {}

    def add(key, num, den):
        tot[key] = tot.get(key, 0.0) + float(num)
        cnt[key] = cnt.get(key, 0.0) + float(den)

    for b in range(0, windows.shape[0], batch):
        w = windows[b:b + batch].to(dev)
        T = w.shape[1]
        with torch.autocast(dev.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            h = trunk.forward_train(w)                       # [B, T, H]
            lg = trunk.logits(h)                             # predicts token j+1 at j
            a = lg.argmax(-1)
            add("main_loss", F.cross_entropy(lg[:, :-1].flatten(0, 1), w[:, 1:].flatten(), reduction="sum"),
                w[:, 1:].numel())
            add("main_acc", (a[:, :-1] == w[:, 1:]).sum(), w[:, 1:].numel())
            if mtp is None:
                continue
            # draft 1 at i: (token i+1, hidden i) -> token i+2, for i in 0..T-3
            out1 = mtp.forward_train(w[:, 1:T - 1], h[:, :T - 2])
            l1 = mtp.logits(out1, trunk.lm_head)
            add("mtp_loss", F.cross_entropy(l1.flatten(0, 1), w[:, 2:].flatten(), reduction="sum"), w[:, 2:].numel())
            d1 = l1.argmax(-1)                               # [B, T-2]
            # draft 2 at i: (token i+2, out1 i) -> token i+3, for i in 0..T-4
            out2 = mtp.forward_train(w[:, 2:T - 1], out1[:, :T - 3])
            d2 = mtp.logits(out2, trunk.lm_head).argmax(-1)  # [B, T-3]
        for ref, tgt1, tgt2 in (("text", w[:, 2:T - 1], w[:, 3:]), ("agree", a[:, 1:T - 2], a[:, 2:T - 1])):
            ok1 = d1[:, :T - 3] == tgt1                      # draft 1 at i (i <= T-4)
            ok2 = d2 == tgt2
            ok2_oracle = d1[:, 1:] == tgt2                   # draft "2" from the true hidden i+1
            n = ok1.numel()
            add(f"p1_{ref}", ok1.sum(), n)
            add(f"p2_{ref}", (ok1 & ok2).sum(), n)           # unconditional: both accepted
            add(f"p2_cond_{ref}", (ok1 & ok2).sum(), ok1.sum())
            add(f"oracle_p2_cond_{ref}", (ok1 & ok2_oracle).sum(), ok1.sum())
    res = {k: tot[k] / max(cnt[k], 1.0) for k in tot}
    res["n_positions"] = int(windows.shape[0] * (windows.shape[1] - 3))
    return res


@torch.no_grad()
def greedy_generate(trunk, prompts: torch.Tensor, n_new: int) -> torch.Tensor:
    """Greedy continuation of `prompts` [B, P] by `n_new` tokens with the runtime's KV cache."""
    B, P = prompts.shape
    dev = trunk.device
    kv = trunk.new_kv([P + n_new] * B)
    pos = torch.arange(P, device=dev).expand(B, P)
    h = trunk.forward(prompts.to(dev), pos, pos, kv, length=P)
    nxt = trunk.logits(h[:, -1:]).argmax(-1)
    out = [prompts.to(dev), nxt]
    for t in range(P, P + n_new - 1):
        p = torch.full((B, 1), t, device=dev)
        nxt = trunk.logits(trunk.forward(nxt, p, p, kv, length=t + 1)).argmax(-1)
        out.append(nxt)
    return torch.cat(out, 1)


@torch.no_grad()
def generated_acceptance(trunk, mtp, prompts: torch.Tensor, n_new: int = 64) -> dict:
    """K=2 acceptance proxy on the target's OWN greedy continuation of held-out prompts.

    Under greedy verification the accepted text IS the target's greedy text, so draft 1 =
    MTP(token i+1, true hidden i) is accepted iff it equals greedy token i+2: exact for p1 up to
    the drafter's context rows (all true-hidden rows here). Draft 2 is chained on the MTP's own
    output (context rows as in `evaluate`); oracle feeds the true hidden i+1 instead.
    """
    P = prompts.shape[1]
    seq = greedy_generate(trunk, prompts, n_new)
    h = trunk.forward_train(seq)
    T = seq.shape[1]
    out1 = mtp.forward_train(seq[:, 1:T - 1], h[:, :T - 2])
    d1 = mtp.logits(out1, trunk.lm_head).argmax(-1)             # at i predicts token i+2
    out2 = mtp.forward_train(seq[:, 2:T - 1], out1[:, :T - 3])
    d2 = mtp.logits(out2, trunk.lm_head).argmax(-1)             # at i predicts token i+3
    i0 = P - 2                                                  # first i whose token i+2 is generated
    ok1 = d1[:, i0:T - 3] == seq[:, i0 + 2:T - 1]
    ok2 = d2[:, i0:] == seq[:, i0 + 3:]
    okor = d1[:, i0 + 1:] == seq[:, i0 + 3:]
    n1 = max(int(ok1.sum()), 1)
    return {"gen_p1": float(ok1.float().mean()), "gen_p2_uncond": float((ok1 & ok2).float().mean()),
            "gen_p2_cond": float((ok1 & ok2).sum()) / n1, "gen_oracle_p2_cond": float((ok1 & okor).sum()) / n1,
            "gen_positions": int(ok1.numel()), "gen_distinct_token_frac":
            float(np.mean([len(set(r.tolist())) / len(r) for r in seq[:, P:]]))}


@torch.no_grad()
def draft_model_acceptance(trunk, draft, prompts: torch.Tensor, n_new: int = 64) -> dict:
    """K=2 proxy for a separate draft LM on the target's own greedy continuation: draft 1 is
    right iff the draft's greedy token equals the target's; draft 2 (given draft 1 right) is the
    draft's next greedy token on the same text, so p2_cond is the draft's accuracy one further on."""
    P = prompts.shape[1]
    seq = greedy_generate(trunk, prompts, n_new)
    d = draft.logits(draft.forward_train(seq)).argmax(-1)      # at j predicts token j+1
    ok = d[:, P - 1:-1] == seq[:, P:]                          # generated tokens P..end
    ok1, ok2 = ok[:, :-1], ok[:, 1:]
    return {"draft_gen_p1": float(ok1.float().mean()), "draft_gen_p2_uncond": float((ok1 & ok2).float().mean()),
            "draft_gen_p2_cond": float((ok1 & ok2).sum()) / max(int(ok1.sum()), 1), "gen_positions": int(ok1.numel())}


def main(argv=None) -> None:
    from atlas_ab.runtime import checkpoint
    from atlas_ab.train.data import load
    ap = argparse.ArgumentParser(description="teacher-forced held-out acceptance proxy")
    ap.add_argument("--ckpt", default="atlas_ab/models/default")
    ap.add_argument("--data", default=".carry/data")
    ap.add_argument("--windows", type=int, default=64)
    ap.add_argument("--len", type=int, default=512)
    ap.add_argument("--split", default="heldout_stdlib", choices=["heldout_stdlib", "heldout", "train"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--target", default=None, help="with a draft --ckpt: the target whose greedy text it drafts")
    ap.add_argument("--gen-prompts", type=int, default=16, help="held-out prompts for the greedy check (0 = skip)")
    ap.add_argument("--gen-prompt-len", type=int, default=256)
    ap.add_argument("--gen-new", type=int, default=64)
    a = ap.parse_args(argv)
    ck = checkpoint.load(a.ckpt, device=a.device, dtype=torch.float32)
    _, arrs = load(a.data)
    w = heldout_windows(arrs[a.split], a.windows, a.len)
    res = evaluate(ck.trunk, ck.mtp, w)
    if a.gen_prompts and a.target:
        tg = checkpoint.load(a.target, device=a.device, dtype=torch.float32)
        pr = heldout_windows(arrs[a.split], a.gen_prompts, a.gen_prompt_len)
        res.update(draft_model_acceptance(tg.trunk, ck.trunk, pr, a.gen_new))
        res["target"] = a.target
    if a.gen_prompts and ck.mtp is not None:
        pr = heldout_windows(arrs[a.split], a.gen_prompts, a.gen_prompt_len)
        res.update(generated_acceptance(ck.trunk, ck.mtp, pr, a.gen_new))
    res.update(ckpt=a.ckpt, ckpt_hash=ck.hash, split=a.split, windows=a.windows, window_len=a.len)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
