"""Tree speculation, predicted against realized: SHADOW_TOPK's coverage of a linear K-chain says
what a static tree would accept (`coverage RUN --tree`); the tree, decoded, says what it does.

    python bench/tree_prediction.py [--trees SPEC;SPEC] [--k 2] [--smoke] [--device cpu|cuda] [--json OUT]

On the default model and workload (all levers off, the baseline's drafter: rows only from its own
proposes), both through speculative/tree_step.py's decode: each turn of each document is decoded
from its full context (the previous turns' chunks and generations; a fresh drafter state per
turn, unlike the runner, which keeps the drafter's rows across turns), once as the linear K-chain
logging the drafter's top-4 per depth, and once per tree. The chain's steps give the coverage and
the prediction (analysis/tree/prediction.py); each tree's steps give the realized reach per depth
(the share of its steps whose accepted path reaches depth i) and tokens per verify step
(accepted + 1, not cut at the turn's end, as the prediction counts them). Both arms commit the
same text (greedy, lossless), so they pair by document: the realized difference carries a
cluster sd over documents. Every committed text is checked equal across arms.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import pandas as pd
import torch

from atlas_ab.analysis.tree import predict_tree, topk_coverage
from atlas_ab.config.structured import WorkloadConfig
from atlas_ab.config.tree import parse_tree
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.runtime import checkpoint
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.speculative.tree_step import decode
from atlas_ab.workload.documents import build_workload

DEFAULT = "atlas_ab/models/default"
TREES = "[(0,), (1,), (0, 0)];topk:2,1;topk:2,2;topk:4,1"


def _arm(ck):
    lay = ck.layout
    return LiveTarget(ck.trunk), MTPProposer(ck.trunk, ck.mtp, "compact", refeed=False,
                                             handoff_norm=lay.handoff_norm, recycle_norm=lay.recycle_norm)


def run_arm(ck, wl, tree, K, topk):
    """Decode every turn of every document; returns (texts {(doc, turn): ids}, step rows)."""
    rows, texts = [], {}
    gen = {d.doc_id: [] for d in wl.docs}
    for t in range(wl.turns):
        prompts = []
        for d in wl.docs:
            ctx = []
            for u in range(t + 1):
                ctx += d.chunks[u] + (gen[d.doc_id][u] if u < t else [])
            prompts.append(ctx)
        step_no = [0]

        def on_step(s, active, t=t, step_no=step_no):
            acc = s.accepted.cpu().numpy()
            tgt = s.target.cpu().numpy()
            ids = s.topk_ids.cpu().numpy() if s.topk_ids is not None else None
            for b in np.nonzero(active)[0]:
                r = dict(doc_id=wl.docs[b].doc_id, turn=t, step=step_no[0], k=K if tree is None else -1,
                         accept_len=int(acc[b]))
                if ids is not None:
                    r.update(target=tgt[b, :K + 1].tolist(), topk_ids=ids[b].tolist(),
                             drafts=s.nodes[b, 1:].tolist())
                rows.append(r)
            step_no[0] += 1

        target, prop = _arm(ck)
        got, _ = decode(target, prop, prompts, wl.gen_tokens, tree=tree, K=K, topk=topk, on_step=on_step)
        for d, g in zip(wl.docs, got):
            gen[d.doc_id].append(g)
            texts[d.doc_id, t] = g
    return texts, pd.DataFrame(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trees", default=TREES, help="';'-separated tree specs")
    p.add_argument("--k", type=int, default=2, help="the linear chain's K (the coverage's depths)")
    p.add_argument("--smoke", action="store_true", help="a tiny workload")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json")
    a = p.parse_args(argv)
    trees = [parse_tree(s) for s in a.trees.split(";")]
    ck = checkpoint.load(DEFAULT, device=a.device, dtype=torch.float32)
    wl = build_workload(WorkloadConfig(n_docs=4, turns=2, chunk_tokens=16, gen_tokens=8) if a.smoke
                        else WorkloadConfig(), DEFAULT)
    t0 = time.time()
    lin_text, lin = run_arm(ck, wl, None, a.k, 4)
    steps = lin.astype({"doc_id": "int64", "turn": "int32", "step": "int64", "k": "int32", "accept_len": "int32"})
    cov = topk_coverage(steps, f"linear K={a.k}")
    print(cov.summary())
    lin_doc = lin.groupby("doc_id")["accept_len"].apply(lambda x: (x + 1).mean())
    res = {"linear": {"K": a.k, "steps": len(lin), "tokens_per_step": float((lin["accept_len"] + 1).mean())},
           "coverage": cov.to_dict(), "trees": []}
    for tree in trees:
        text, st = run_arm(ck, wl, tree, a.k, 0)
        if text != lin_text:
            print(f"tree {tree.describe()}: committed text differs from the chain's", file=sys.stderr)
            return 1
        pred = predict_tree(cov, tree, linear_k=a.k)
        acc = st["accept_len"].to_numpy()
        real = [float((acc >= i).mean()) for i in range(1, tree.max_depth + 1)]
        tree_doc = st.groupby("doc_id")["accept_len"].apply(lambda x: (x + 1).mean())
        d = (tree_doc - lin_doc).to_numpy()
        sd = float(d.std(ddof=1) / np.sqrt(len(d)))
        row = {"tree": tree.describe(), "steps": len(st), "predicted": pred.to_dict(),
               "realized": {"p": real, "tokens_per_step": float((acc + 1).mean()),
                            "diff_vs_linear": float(d.mean()), "diff_cluster_sd": sd}}
        res["trees"].append(row)
        print(f"\n{tree.describe()}  ({len(st):,} steps)")
        print("| depth | predicted p (sd) | realized p |\n|---|---|---|")
        for dp, r in zip(pred.depths, real):
            print(f"| {dp.depth} | {dp.p:.4f} ({dp.se:.4f}) | {r:.4f} |")
        print(f"tokens/step: predicted {pred.tokens_per_step:.4f} (sd {pred.tokens_se:.4f}), realized "
              f"{row['realized']['tokens_per_step']:.4f}; vs linear K={a.k}: predicted {pred.diff:+.4f} "
              f"(sd {pred.diff_se:.4f}), realized {d.mean():+.4f} (cluster sd {sd:.4f}, "
              f"{len(d)} documents)")
    res["seconds"] = time.time() - t0
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
