"""What the KV-only row shortcut saves: the drafter's context rows of a DRAFTER_PREFILL run over the
default workload (16 documents x 8 turns x 64-token chunks: each turn's chunk, plus the pending token,
written as one [16, 65] batch), through the whole block (PREFILL_FULL) and through the shortcut
(`MTPModule.write_kv_rows`, the default), alternated in one process; prints the median time of each
and their ratio, and checks that the two pools are equal bit for bit.

    python bench/bench_kv_rows.py                      # the CPU, fp32, the shipped 7.3M model
    python bench/bench_kv_rows.py --device cuda        # one GPU, bf16: 7.3M, the 33.6M preset, the 5.7B shape

On the GPU the 33.6M and 5.7B shapes are random MTP layers (timing only: the rows' cost does not depend
on the weights); the hiddens are random rows of the model's width, the tokens the workload's.
"""
from __future__ import annotations

import argparse
import sys
import time
from statistics import median

import torch

from atlas_ab.runtime.args import ModelArgs
from atlas_ab.runtime.model import MTPModule, init_weights

# hidden, heads, kv heads, intermediate, vocab (bench_forward.py's shapes; the preset is model=gpu's)
RANDOM_SHAPES = {"33.6M": (512, 8, 8, 1408, 4096), "5.7B": (4096, 32, 8, 11008, 4096)}


def default_drafter(device, dtype):
    from atlas_ab.runtime import checkpoint
    ck = checkpoint.load("atlas_ab/models/default", device, dtype)
    return ck.mtp.eval(), ck.trunk.embed_tokens


def random_drafter(shape: str, device, dtype):
    H, heads, kvh, inter, vocab = RANDOM_SHAPES[shape]
    a = ModelArgs(vocab_size=vocab, hidden_size=H, intermediate_size=inter, num_hidden_layers=1,
                  num_attention_heads=heads, num_key_value_heads=kvh, head_dim=H // heads, num_nextn_predict_layers=1)
    torch.manual_seed(0)
    mtp = MTPModule(a)
    init_weights(mtp)
    embed = torch.nn.Embedding(vocab, H)
    return mtp.to(device, dtype).eval(), embed.to(device, dtype)


def workload_tokens(turns: int, chunk: int, docs: int) -> torch.Tensor:
    """[docs, turns * (chunk + 1)] the default workload's tokens (the chunks, each turn's rows one wider)."""
    from atlas_ab.config.structured import WorkloadConfig
    from atlas_ab.workload.documents import build_workload
    w = build_workload(WorkloadConfig(n_docs=docs, turns=turns, chunk_tokens=chunk), "atlas_ab/models/default")
    rows = [[t for c in d.chunks for t in c + c[:1]] for d in w.docs]
    return torch.tensor(rows)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prefill(mtp, embed, tok, hid, turns: int, T: int, full: bool):
    """Every turn's rows written to a fresh pool; returns the pool and the seconds it took."""
    B = tok.shape[0]
    kv = mtp.new_kv([turns * T + 10] * B)
    sync(tok.device)
    t0 = time.perf_counter()
    with torch.no_grad():
        for t in range(turns):
            s = slice(t * T, (t + 1) * T)
            slots = torch.arange(t * T, (t + 1) * T, device=tok.device).expand(B, T)
            if full:
                mtp.forward(tok[:, s], hid[:, s], slots, slots, kv, embed, length=(t + 1) * T)
            else:
                mtp.write_kv_rows(tok[:, s], hid[:, s], slots, slots, kv, embed)
    sync(tok.device)
    return kv, time.perf_counter() - t0


def measure(name, mtp, embed, tok, reps: int, turns: int, T: int) -> dict:
    g = torch.Generator(device="cpu").manual_seed(1)
    hid = torch.randn(*tok.shape, mtp.args.hidden_size, generator=g).to(tok.device, mtp.dtype)
    for full in (True, False):                  # warm-up (first calls allocate, Triton compiles)
        prefill(mtp, embed, tok, hid, turns, T, full)
    times = {True: [], False: []}
    for _ in range(reps):
        for full in (True, False):
            times[full].append(prefill(mtp, embed, tok, hid, turns, T, full)[1])
    a, b = prefill(mtp, embed, tok, hid, turns, T, True)[0], prefill(mtp, embed, tok, hid, turns, T, False)[0]
    equal = torch.equal(a.k, b.k) and torch.equal(a.v, b.v)
    full, short = median(times[True]) * 1e3, median(times[False]) * 1e3
    return {"shape": name, "rows": tok.numel(), "full_ms": full, "short_ms": short, "ratio": short / full,
            "equal": equal}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--shapes", default=None,
                   help="comma list of 7.3M,33.6M,5.7B (default: 7.3M on the CPU, all on a GPU)")
    a = p.parse_args(argv)
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench_kv_rows: error: --device cuda but no GPU is visible", file=sys.stderr)
        return 2
    if a.threads:
        torch.set_num_threads(a.threads)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shapes = (a.shapes or ("7.3M,33.6M,5.7B" if device.type == "cuda" else "7.3M")).split(",")
    turns, chunk, docs = 8, 64, 16
    T = chunk + 1
    try:
        tok = workload_tokens(turns, chunk, docs).to(device)
    except ImportError as e:      # a machine without the workload's libraries: the rows' cost does not read the ids
        print(f"(the workload's tokens need {e.name}: random ids of its shape instead)")
        tok = torch.randint(0, 4096, (docs, turns * T), generator=torch.Generator().manual_seed(0)).to(device)
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), {dtype}, "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}, {docs} docs x {turns} turns x {T} rows, "
          f"median of {a.reps}")
    print("| shape | rows | full block ms | KV-only ms | KV-only / full | pools equal |")
    print("|---|---|---|---|---|---|")
    for s in shapes:
        mtp, embed = default_drafter(device, dtype) if s == "7.3M" else random_drafter(s, device, dtype)
        r = measure(s, mtp, embed, tok, a.reps, turns, T)
        print(f"| {s} | {r['rows']:,} | {r['full_ms']:.2f} | {r['short_ms']:.2f} | {r['ratio']:.3f} | {r['equal']} |",
              flush=True)
        del mtp, embed
    return 0


if __name__ == "__main__":
    sys.exit(main())
