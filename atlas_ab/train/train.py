"""Train a target jointly with one DeepSeek-style MTP module (or a plain draft LM).

    python -m atlas_ab.train.data                         # token arrays -> .carry/data (HERE)
    python -m atlas_ab.train.train --out DIR --preset default|draft|gpu|tiny [--steps N] ...

Trains THROUGH the runtime's classes (atlas_ab.runtime.model.Transformer / MTPModule) and saves
with atlas_ab.runtime.checkpoint.save (bf16 safetensors, HF layout, tokenizer.json copied in).

Loss = main + mtp_weight (0.3) x MTP loss.
  main: hidden i of the trunk -> token i+1.
  MTP:  row i takes (token i+1, trunk hidden i, not detached) -> token i+2.
AdamW (0.9, 0.95, wd 0.1), lr 1e-3, linear warm-up (100 steps) then cosine to 10%, grad clip 1.0,
bf16 autocast on CUDA, batches of random windows of the train split.

--budget-s caps the step count from the speed measured over the first warm-up steps (before the
cosine part of the schedule starts, so the schedule stays consistent); the log says what it chose.
No hydra/omegaconf here: this runs on the bare GPU machine.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ARCH = {  # hidden, layers, heads, kv heads, SwiGLU width
    "tiny": (64, 2, 2, 1, 176),
    "default": (256, 6, 4, 2, 688),
    "draft": (128, 2, 4, 2, 344),
    "gpu": (512, 8, 8, 8, 1408),
}
PRESETS = {
    "tiny": dict(mtp=True, steps=30, batch=4, seq_len=128, warmup=5, eval_every=0, eval_windows=4),
    "default": dict(mtp=True, steps=800, batch=48, seq_len=1024, warmup=100, eval_every=250, eval_windows=32),
    "draft": dict(mtp=False, steps=3000, batch=48, seq_len=1024, warmup=100, eval_every=500, eval_windows=32),
    "gpu": dict(mtp=True, steps=1500, batch=48, seq_len=1024, warmup=100, eval_every=250, eval_windows=32),
}


def model_args(preset: str, vocab_size: int, mtp: bool):
    from atlas_ab.runtime.args import ModelArgs
    H, L, nh, kvh, ff = ARCH[preset]
    return ModelArgs(vocab_size=vocab_size, hidden_size=H, intermediate_size=ff, num_hidden_layers=L,
                     num_attention_heads=nh, num_key_value_heads=kvh, head_dim=H // nh,
                     rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
                     num_nextn_predict_layers=1 if mtp else 0, model_type="llama",
                     max_position_embeddings=4096)


def lr_at(step: int, total: int, base: float, warmup: int, floor: float = 0.1) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return base * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))


def n_params(*mods) -> int:
    seen, n = set(), 0
    for m in mods:
        if m is None:
            continue
        for p in m.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                n += p.numel()
    return n


def parse(argv=None):
    ap = argparse.ArgumentParser(description="train a target+MTP (or a draft LM) on the offline corpus")
    ap.add_argument("--out", required=True, help="checkpoint directory to write")
    ap.add_argument("--preset", default="default", choices=sorted(PRESETS))
    ap.add_argument("--steps", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--no-mtp", action="store_true", help="train without an MTP module")
    ap.add_argument("--data", default=".carry/data", help="token arrays from python -m atlas_ab.train.data")
    ap.add_argument("--tokenizer", default="atlas_ab/models/default/tokenizer.json")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=0.0, help="cap steps to fit this many seconds (0 = off)")
    ap.add_argument("--eval-every", type=int)
    ap.add_argument("--eval-windows", type=int)
    ap.add_argument("--log-every", type=int, default=100)
    a = ap.parse_args(argv)
    p = PRESETS[a.preset]
    for k in ("steps", "batch", "seq_len", "warmup", "eval_every", "eval_windows"):
        if getattr(a, k) is None:
            setattr(a, k, p[k])
    a.mtp = p["mtp"] and not a.no_mtp
    return a


def main(argv=None) -> dict:
    from atlas_ab.runtime import checkpoint
    from atlas_ab.runtime.model import MTPModule, Transformer, init_weights
    from atlas_ab.train.data import load
    from atlas_ab.train.tf_eval import evaluate, heldout_windows

    a = parse(argv)
    dev = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device)
    torch.manual_seed(a.seed)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    amp = torch.bfloat16 if dev.type == "cuda" else None
    log = lambda s: print(f"[{a.preset}] {s}", flush=True)  # noqa: E731

    meta, arrs = load(a.data)
    tok_path = Path(a.tokenizer)
    from atlas_ab.workload.corpus import file_sha256
    if file_sha256(tok_path) != meta["tokenizer_hash"]:
        raise SystemExit(f"{a.data} was tokenized with another tokenizer than {tok_path}")
    from tokenizers import Tokenizer
    vocab = Tokenizer.from_file(str(tok_path)).get_vocab_size()

    args = model_args(a.preset, vocab, a.mtp)
    trunk = Transformer(args)
    init_weights(trunk)
    mtp = None
    if a.mtp:
        mtp = MTPModule(args)
        init_weights(mtp)
        mtp.attach(trunk)
    trunk.to(dev).train()
    if mtp is not None:
        mtp.to(dev).train()
    P = n_params(trunk, mtp)
    log(f"{P / 1e6:.2f}M params ({n_params(trunk) / 1e6:.2f}M trunk), arch {ARCH[a.preset]}, vocab {vocab}, "
        f"device {dev}{' ' + torch.cuda.get_device_name(dev) if dev.type == 'cuda' else ''}, "
        f"corpus {meta['corpus']['sha256'][:19]} py{meta['corpus']['python_version']} "
        f"{meta['corpus']['n_files']} files, {meta['train_tokens']} train tokens")

    params = [p for m in (trunk, mtp) if m is not None for p in m.parameters()]
    uniq = list({id(p): p for p in params}.values())
    decay = [p for p in uniq if p.dim() >= 2]
    no_decay = [p for p in uniq if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), fused=dev.type == "cuda")

    data = torch.from_numpy(arrs["train"].astype(np.int64)).to(dev)
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    W = a.seq_len + 2
    offs = torch.arange(W, device=dev)
    ev_windows = heldout_windows(arrs["heldout"], a.eval_windows, min(a.seq_len, 1024)) if a.eval_windows else None

    def do_eval():
        trunk.eval()
        if mtp is not None:
            mtp.eval()
        r = evaluate(trunk, mtp, ev_windows, batch=8, autocast_dtype=amp)
        trunk.train()
        if mtp is not None:
            mtp.train()
        return r

    total = a.steps
    probe_from = min(10, a.warmup // 2)
    probe_to = max(probe_from + 1, min(a.warmup - 1, 60))
    t_start = time.time()
    t_probe = None
    run_main = torch.zeros((), device=dev)
    run_mtp = torch.zeros((), device=dev)
    run_n = 0
    hist = []
    step = 0
    last = {}
    while step < total:
        if a.budget_s and step == probe_from:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t_probe = time.time()
        if a.budget_s and step == probe_to and t_probe is not None:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            dt = (time.time() - t_probe) / (probe_to - probe_from)
            left = a.budget_s - (time.time() - t_start)
            n_evals = (total // a.eval_every) if a.eval_every else 0
            fit = step + int(0.92 * left / dt) - n_evals * 2
            if fit < total:
                log(f"budget {a.budget_s:.0f}s at {dt * 1e3:.1f} ms/step: steps {total} -> {max(fit, a.warmup + 1)}")
                total = max(fit, a.warmup + 1)
            else:
                log(f"budget {a.budget_s:.0f}s at {dt * 1e3:.1f} ms/step: {total} steps fit")
        lr = lr_at(step, total, a.lr, a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, data.numel() - W, (a.batch,), device=dev, generator=gen)
        w = data[starts[:, None] + offs]                    # [B, T+2]
        T = a.seq_len
        with torch.autocast(dev.type, dtype=amp, enabled=amp is not None):
            h = trunk.forward_train(w[:, :T])
            main_loss = F.cross_entropy(trunk.logits(h).flatten(0, 1), w[:, 1:T + 1].flatten())
            loss = main_loss
            if mtp is not None:
                out = mtp.forward_train(w[:, 1:T + 1], h)
                mtp_loss = F.cross_entropy(mtp.logits(out, trunk.lm_head).flatten(0, 1), w[:, 2:T + 2].flatten())
                loss = loss + a.mtp_weight * mtp_loss
                run_mtp += mtp_loss.detach()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(uniq, 1.0)
        opt.step()
        run_main += main_loss.detach()
        run_n += 1
        step += 1
        if step % a.log_every == 0 or step == total:
            last = {"main": run_main.item() / run_n, "mtp": run_mtp.item() / run_n if mtp is not None else None}
            log(f"step {step}/{total} lr {lr:.2e} main {last['main']:.4f}"
                + (f" mtp {last['mtp']:.4f}" if mtp is not None else "") + f" {time.time() - t_start:.0f}s")
            run_main.zero_()
            run_mtp.zero_()
            run_n = 0
        if ev_windows is not None and a.eval_every and (step % a.eval_every == 0) and step < total:
            r = do_eval()
            hist.append({"step": step, **{k: round(v, 4) for k, v in r.items()}})
            log("heldout " + " ".join(f"{k} {v:.4f}" for k, v in r.items() if k != "n_positions"))
    if dev.type == "cuda":
        torch.cuda.synchronize()
    wall = time.time() - t_start
    final = {}
    if ev_windows is not None:
        final = do_eval()
        hist.append({"step": step, **{k: round(v, 4) for k, v in final.items()}})
        log("heldout final " + " ".join(f"{k} {v:.4f}" for k, v in final.items() if k != "n_positions"))

    ck_hash = checkpoint.save(a.out, args, trunk, mtp, tokenizer_json=tok_path)
    summary = {
        "preset": a.preset, "steps": step, "batch": a.batch, "seq_len": a.seq_len, "lr": a.lr,
        "warmup": a.warmup, "mtp_weight": a.mtp_weight if mtp is not None else None,
        "weight_decay": a.weight_decay, "seed": a.seed,
        "final_train_loss_main": last.get("main"), "final_train_loss_mtp": last.get("mtp"),
        "heldout_final": final, "heldout_history": hist,
        "params": P, "params_trunk": n_params(trunk),
        "params_mtp": sum(p.numel() for p in mtp.parameters()) if mtp is not None else 0,
        "wall_s": round(wall, 1), "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "torch": torch.__version__, "python": sys.version.split()[0],
        "corpus": meta["corpus"], "tokenizer_hash": meta["tokenizer_hash"], "train_tokens": meta["train_tokens"],
        "checkpoint_hash": ck_hash,
        "command": "python -m atlas_ab.train.train " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    (Path(a.out) / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    log(f"DONE steps {step} main {last.get('main')} mtp {last.get('mtp')} params {P} wall {wall:.1f}s -> {a.out}")
    return summary


if __name__ == "__main__":
    main()
