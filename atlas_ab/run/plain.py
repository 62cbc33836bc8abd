"""K = 0: plain decode, the step an engine without speculation runs (`arm.num_drafts=0`).

A wave of B documents decodes each turn target-only and greedily: the turn's prefill (its new chunk
and the pending token) commits the turn's first token, as in the speculative loop, then each step is
ONE batched one-token forward of the target, its argmax, and one read back to the host. No drafter
runs. On the GPU the one-token forward replays one CUDA graph (runtime/graphs.py `StepGraphs`, the pool's
full length); it is timed as the loop times its steps (speculative/timing.py: a step's kind is
"serial", the wave's first step and any that first ran a static step are warm-up). Rows are
telemetry rows with k = 0 and accept_len = 0 (no drafts, no confidences), so the analysis reads a
plain run as it reads a DRAFT_CONF serial step; the lossless gate checks its text like any run's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import torch

from atlas_ab.runtime.batch import ragged_window
from atlas_ab.runtime.graphs import StepGraphs
from atlas_ab.speculative.timing import StepTimer
from atlas_ab.telemetry.step_blocks import StepBlocks


@dataclass
class PlainTrace:
    steps: pa.Table
    generated: list = field(default_factory=list)   # [seq][turn] -> list[int] of G tokens
    n_tokens: int = 0


def _no_lists(table: pa.Table, names: tuple[str, ...]) -> pa.Table:
    """The list columns a plain step has no items for (drafts, conf) as empty lists."""
    for name in names:
        i = table.schema.get_field_index(name)
        typ = table.schema.field(name).type
        n = table.num_rows
        empty = pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], type=typ.value_type))
        table = table.set_column(i, name, empty)
    return table


@torch.no_grad()
def plain_wave(trunk, docs, gen_tokens: int, arm_name: str, graphs: bool, capacity: int | None,
               on_step=None) -> PlainTrace:
    """One wave of plain decode over `docs`; capacity: the static KV length per sequence (graphs)."""
    p = next(trunk.parameters())
    dev = p.device
    B, turns, G = len(docs), len(docs[0].chunks), gen_tokens
    budgets = [sum(len(c) for c in d.chunks) + turns * G + 2 for d in docs]
    kv = trunk.new_kv([capacity] * B if capacity else budgets)
    hist = np.zeros((B, kv.max_capacity + 1), dtype=np.int64)                   # [B, L]
    n_tok = np.zeros(B, dtype=np.int64)          # tokens in hist (the last one not yet processed)
    kv_len = np.zeros(B, dtype=np.int64)         # positions the target has processed
    steps, timer = StepGraphs(graphs), StepTimer(live=True)
    blocks = StepBlocks(K=0, topk=0)
    ar = np.arange(B)
    doc_ids = np.array([d.doc_id for d in docs], dtype=np.int64)
    generated = [[] for _ in range(B)]
    t_ = lambda x: torch.as_tensor(x, device=dev)  # noqa: E731

    def one_token(tok, pos, slots, length):
        h = trunk.forward(tok, pos, slots, kv, length=length)                      # [B, 1, H]
        return trunk.logits(h)[:, 0].argmax(dim=-1)                                 # [B]

    n_total = 0
    for t in range(turns):
        for b, d in enumerate(docs):
            c = d.chunks[t]
            hist[b, n_tok[b]:n_tok[b] + len(c)] = c
            n_tok[b] += len(c)
        start = n_tok.copy()
        count = n_tok - kv_len
        tok, pos, slots, length = ragged_window(hist, kv_len, count)
        h = trunk.forward(t_(tok), t_(pos), t_(slots), kv, length=length)           # [B, T, H] the prefill
        last = h[t_(ar), t_(count - 1)]                                             # [B, H]
        nxt = trunk.logits(last[:, None])[:, 0].argmax(dim=-1).cpu().numpy()
        kv_len = n_tok.copy()
        hist[ar, n_tok] = nxt
        n_tok += 1
        for s in range(G - 1):
            tok, pos, slots, length = ragged_window(hist, kv_len, n_tok - kv_len)
            timer.start()
            nxt = steps("decode", one_token, [t_(tok), t_(pos), t_(slots)], length, kv.max_capacity)
            nxt = nxt.cpu().numpy()                                                # the step's one read
            step_ms, warmup_ms = timer.stop("serial")
            kv_len = n_tok.copy()
            hist[ar, n_tok] = nxt
            blocks.add(doc_id=doc_ids, turn=np.full(B, t), step=np.full(B, s), k=np.zeros(B, np.int64),
                       accept_len=np.zeros(B, np.int64), arm=[arm_name], seq=ar, position=n_tok - 1,
                       drafts=np.zeros((B, 1), np.int64), target=nxt[:, None].astype(np.int64),
                       conf=np.zeros((B, 1), np.float32), gated=np.zeros(B, bool), n_committed=np.ones(B, np.int64),
                       step_ms=np.full(B, step_ms), warmup_ms=np.full(B, warmup_ms),
                       drafter_rows=np.zeros(B, np.int64), fed_rows=np.zeros(B, np.int64))
            n_tok += 1
            if on_step is not None:
                on_step(B, np.zeros(B, np.int64), np.zeros(B, np.int64))
        for b in range(B):
            generated[b].append(hist[b, start[b]:start[b] + G].tolist())
        n_total += B * G
    return PlainTrace(_no_lists(blocks.table(), ("drafts", "conf")), generated, n_total)
