"""The target's greedy (or sampled) trajectory of a wave: built once, replayed by every arm.

`greedy` is THE target-only greedy decode: over B documents and all their turns,
batched, one token per forward (each turn's first forward is the prefill of its
new chunk). Replay mode builds its trajectories with it, so the text a replay
run commits is, by construction, target-only greedy text (the lossless gate
checks live runs teacher-forced instead: gate.teacher_forced).

For replay it also keeps, at every position, the hidden the drafter is handed
(the trunk's last-layer output, pre final norm: the prefill's `hid` rows, the
verify's `vh` rows) and, past each turn's last token, `extend` more greedy
tokens (the continuation a verify at the turn's end compares its later drafts
with: a propose at the turn's last step still drafts K tokens, and its
accept_len counts them all).

Arrays of one wave (B sequences, L = the longest context, X = extend):
  tokens    [B, L] int32   the committed context: chunks and generated tokens (-1 past a sequence's end)
  argmax    [B, L] int32   the target's argmax at each position (-1 at prompt rows but each chunk's last)
  hiddens   [B, L, H]      the hidden of each position, in the run dtype (the drafter's input)
  ext       [B, turns, X]  int32: greedy continuation past each turn's end; ext[.., 0] == argmax at the end
  gen_start [B, turns]     int64: position of each turn's first generated token
  margins   [B, L, 2]      float32: top-1 minus top-2 logit and top-1, where an argmax was taken

`sampled` is the same decode drawing each token from the target's distribution (a sampled
workload's replay stores it; `argmax` then holds the drawn tokens, margins are NaN), and keeps
  ext_hiddens [B, turns, X, H]  the hidden at each turn's end + j, from which replay computes
                                the target's distribution over the continuation
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from atlas_ab.config.structured import RANGES
from atlas_ab.runtime.batch import ragged_window
from atlas_ab.runtime.graphs import StepGraphs

#: A verify at a turn's last step looks up to K-1 tokens past the turn's end, so the stored
#: continuation covers the largest K an arm may have (every arm of a sweep shares it).
EXTEND = RANGES["num_drafts"][1]


@dataclass
class Trajectory:
    doc_ids: np.ndarray
    tokens: np.ndarray
    argmax: np.ndarray
    hiddens: torch.Tensor | None
    ext: np.ndarray
    gen_start: np.ndarray
    margins: np.ndarray
    gen_tokens: int
    ext_hiddens: torch.Tensor | None = None   # [B, turns, X, H]: the hidden at end + j (sampled trajectories)

    @property
    def batch(self) -> int:
        return len(self.doc_ids)

    @property
    def bytes_per_position(self) -> int:
        """Stored bytes per sequence position: the hidden row (H x the dtype's size), the token and
        the argmax (int32 each) and two float32 margins; each turn adds X + 2 ints more. At the
        5.7B shape (H = 4096, bf16): 8,208 bytes, so 64 docs x 8 turns x 96 positions ~ 403 MB."""
        h = 0 if self.hiddens is None else self.hiddens.shape[-1] * self.hiddens.element_size()
        return h + 4 + 4 + 8

    @property
    def turn_end(self) -> np.ndarray:
        """[B, turns] position of each turn's last generated token."""
        return self.gen_start + self.gen_tokens - 1

    def generated(self) -> list[list[list[int]]]:
        """[seq][turn] -> the turn's G generated tokens (what the loop's trace lists)."""
        G = self.gen_tokens
        return [[self.tokens[b, s:s + G].tolist() for s in self.gen_start[b]] for b in range(self.batch)]

    def turn_margins(self) -> list[list[list[tuple[float, float]]]]:
        """[seq][turn][g] -> (top1 - top2, top1) of the argmax that chose generated token g."""
        G = self.gen_tokens
        return [[[tuple(float(v) for v in self.margins[b, p]) for p in range(s - 1, s - 1 + G)]
                 for s in self.gen_start[b]] for b in range(self.batch)]

    # -- storage: flat named tensors (safetensors) --------------------------------------
    def tensors(self) -> dict[str, torch.Tensor]:
        t = lambda x, dtype: torch.as_tensor(np.ascontiguousarray(x), dtype=dtype)  # noqa: E731
        out = {"doc_ids": t(self.doc_ids, torch.int64), "tokens": t(self.tokens, torch.int32),
               "argmax": t(self.argmax, torch.int32), "ext": t(self.ext, torch.int32),
               "gen_start": t(self.gen_start, torch.int64), "margins": t(self.margins, torch.float32),
               "gen_tokens": torch.tensor([self.gen_tokens], dtype=torch.int64)}
        if self.hiddens is not None:
            out["hiddens"] = self.hiddens.detach().cpu().contiguous()
        if self.ext_hiddens is not None:
            out["ext_hiddens"] = self.ext_hiddens.detach().cpu().contiguous()
        return out

    @staticmethod
    def from_tensors(t: dict[str, torch.Tensor]) -> "Trajectory":
        return Trajectory(doc_ids=t["doc_ids"].numpy(), tokens=t["tokens"].numpy(), argmax=t["argmax"].numpy(),
                          hiddens=t.get("hiddens"), ext=t["ext"].numpy(), gen_start=t["gen_start"].numpy(),
                          margins=t["margins"].numpy(), gen_tokens=int(t["gen_tokens"][0]),
                          ext_hiddens=t.get("ext_hiddens"))


@torch.no_grad()
def greedy(trunk, docs, gen_tokens: int, extend: int = 0, keep_hiddens: bool = False,
           graphs: bool = False, features: tuple = ()) -> Trajectory:
    """Target-only greedy over docs x turns, batched, one token per forward.

    `extend` more tokens are decoded past each turn's end without being committed
    (the next turn's prefill starts again from the turn's last token, overwriting
    their KV). `graphs`: replay the one-token forwards from a CUDA graph (the
    prefill stays eager). `features`: the hiddens kept are those layers' residual streams,
    concatenated (a drafter's `feature_layers`; () = the last layer's output)."""
    return _decode(trunk, docs, gen_tokens, extend, keep_hiddens, graphs, None, 0, features)


@torch.no_grad()
def sampled(trunk, docs, gen_tokens: int, rule, seed: int, extend: int = 0, keep_hiddens: bool = False,
            graphs: bool = False, features: tuple = ()) -> Trajectory:
    """Target-only sampling under `rule` (distribution.Sampling): as `greedy`, each token drawn
    from the target's distribution with the uniform keyed (seed, doc, turn, the position before
    it, 0, TRAJECTORY). With `keep_hiddens` it also keeps the continuation's hiddens
    (`ext_hiddens`: replay draws coupled drafts from the target's distribution there)."""
    return _decode(trunk, docs, gen_tokens, extend, keep_hiddens, graphs, rule, seed, features)


def _decode(trunk, docs, gen_tokens, extend, keep_hiddens, graphs, rule, seed, features=()) -> Trajectory:
    from atlas_ab.speculative import uniforms
    from atlas_ab.speculative.distribution import draw, probs

    p = next(trunk.parameters())
    dev = p.device
    B, turns = len(docs), len(docs[0].chunks)
    G = gen_tokens
    budgets = [sum(len(c) for c in d.chunks) + turns * G + extend + 2 for d in docs]
    kv = trunk.new_kv(budgets)
    width = max(budgets) + 1
    hist = np.zeros((B, width), dtype=np.int64)
    n_tok = np.zeros(B, dtype=np.int64)      # tokens in hist (the last one not yet processed)
    kv_len = np.zeros(B, dtype=np.int64)     # positions the target has processed
    argmax = np.full((B, width), -1, dtype=np.int32)
    margins = np.full((B, width, 2), np.nan, dtype=np.float32)
    ext = np.full((B, turns, extend), -1, dtype=np.int32)
    gen_start = np.zeros((B, turns), dtype=np.int64)
    F = trunk.args.hidden_size * (len(features) or 1)       # the width of the hidden the drafter is handed
    hiddens = torch.zeros(B, width, F, device=dev, dtype=p.dtype) if keep_hiddens else None
    ext_hiddens = (torch.zeros(B, turns, extend, F, device=dev, dtype=p.dtype)
                   if keep_hiddens and rule is not None else None)
    doc_t = torch.as_tensor([d.doc_id for d in docs], device=dev)
    step_graphs = StepGraphs(graphs)
    ar = np.arange(B)
    t_ = lambda x: torch.as_tensor(x, device=dev)  # noqa: E731

    def fwd(tok, pos, slots, length):
        """(the last layer's hidden, the hidden kept for the drafter)."""
        if not features:
            h = trunk.forward(tok, pos, slots, kv, length=length)
            return h, h
        return trunk.forward_features(tok, pos, slots, kv, features, length=length)

    def one_token(tok, pos, slots, length):
        h, f = fwd(tok, pos, slots, length)
        top2 = trunk.logits(h)[:, 0].float().topk(2, dim=-1)
        return f, top2.values, top2.indices[:, 0]

    def one_token_logits(tok, pos, slots, length):
        h, f = fwd(tok, pos, slots, length)
        return f, trunk.logits(h)[:, 0]

    def choose(logits, t, at):
        """(the next token, margins) after positions `at` from logits [B, V]: a draw under `rule`."""
        u = uniforms.uniform(seed, doc_t, t, t_(at), 0, uniforms.TRAJECTORY)
        return draw(probs(logits, rule), u), torch.full((B, 2), float("nan"), device=dev)

    for t in range(turns):
        for b, d in enumerate(docs):
            c = d.chunks[t]
            hist[b, n_tok[b]:n_tok[b] + len(c)] = c
            n_tok[b] += len(c)
        gen_start[:, t] = n_tok
        for g in range(G + extend):
            count = n_tok - kv_len
            tok, pos, slots, length = ragged_window(hist, kv_len, count)
            if tok.shape[1] == 1 and rule is None:
                h, vals, nxt = step_graphs("decode", one_token, [t_(tok), t_(pos), t_(slots)], length, kv.max_capacity)
            elif tok.shape[1] == 1:
                h, z = step_graphs("decode", one_token_logits, [t_(tok), t_(pos), t_(slots)], length, kv.max_capacity)
                nxt, vals = choose(z, t, n_tok - 1)
            else:      # the turn's prefill (its new chunk and the pending token), eager
                full, h = fwd(t_(tok), t_(pos), t_(slots), length)
                last = full[t_(ar), t_(count - 1)]
                z = trunk.logits(last[:, None])[:, 0]
                if rule is None:
                    top2 = z.float().topk(2, dim=-1)
                    vals, nxt = top2.values, top2.indices[:, 0]
                else:
                    nxt, vals = choose(z, t, n_tok - 1)
            if hiddens is not None and g <= G:    # (past the turn's last token, positions are the next chunk's)
                rows, cols = np.nonzero(np.arange(tok.shape[1])[None, :] < count[:, None])
                hiddens[t_(rows), t_(kv_len[rows] + cols)] = h[t_(rows), t_(cols)]
            if ext_hiddens is not None and g >= G:   # one token per sequence: the hidden at end + (g - G)
                ext_hiddens[:, t, g - G] = h[:, 0]
            nxt, vals = nxt.cpu().numpy(), vals.cpu().numpy()
            if g <= G:                            # the argmax (or draw) at a position of the sequence
                at = n_tok - 1
                argmax[ar, at] = nxt
                margins[ar, at, 0], margins[ar, at, 1] = vals[:, 0] - vals[:, 1], vals[:, 0]
            if g >= G:
                ext[:, t, g - G] = nxt
            kv_len = n_tok.copy()
            hist[ar, n_tok] = nxt
            n_tok += 1
        if extend:    # back to the turn's last token: it is pending, as in the live loop
            n_tok -= extend
            kv_len = n_tok - 1
    L = int(n_tok.max())
    tokens = np.where(np.arange(L)[None, :] < n_tok[:, None], hist[:, :L], -1).astype(np.int32)
    return Trajectory(doc_ids=np.array([d.doc_id for d in docs], dtype=np.int64), tokens=tokens,
                      argmax=argmax[:, :L],
                      hiddens=None if hiddens is None else hiddens[:, :L].contiguous(), ext=ext,
                      gen_start=gen_start, margins=margins[:, :L], gen_tokens=G,
                      ext_hiddens=None if ext_hiddens is None else ext_hiddens.contiguous())
