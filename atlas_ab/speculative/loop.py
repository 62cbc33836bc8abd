"""The batched speculative loop: propose -> verify -> accept -> commit.

One `Wave` runs B documents through all their turns together. Turn t appends
the document's next chunk to the context, prefills the target over it (the
target KV is reused across turns, so turns >= 1 are warm), then generates
exactly `gen_tokens` tokens: the prefill's own next token, then verify steps.
Exactly G tokens per turn (a step that would overshoot commits only what the
turn still needs) keeps every arm of a greedy run on the same target trajectory,
so arms stay comparable position by position.

A step reads like gpt-fast's `speculative_decode`: the drafter proposes K drafts,
the verifier (verify.py: greedy, speculative sampling, or its coupled replay)
runs the target and accepts a prefix, and the host, after ONE read of the device
(host_read.py: accepted counts, drafts, the target's tokens, confidences, and
under sampling the exact acceptance probabilities and PITs), commits the
accepted drafts and the token after them. Each lever is one short, named branch:
CATCHUP (`_catchup`), REFEED and SHIFT (`_ring_after_verify`), RING_PREFILL
(`_ring_prefill`), DRAFT_CONF (`gated`), SHADOW_TOPK (`topk`), ORACLE_P2
(`_oracle`), DRAFTER_PREFILL (`_prefill_turn`), FINGERPRINTS (`self.ev`).

The target side (the turn prefill and the verify) is the wave's `target`
(targets.py): the trunk's forwards in live mode, a stored trajectory in
replay mode. Everything else here is the same code in both modes; only live
mode times its steps (`step_ms` is null in replay; each kind's first step in a wave is warm-up,
timed apart in `warmup_ms`: timing.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.base import RowFeed
from atlas_ab.proposers.ring import Ring, gap_keys
from atlas_ab.speculative.host_read import StepRead, read_step
from atlas_ab.speculative.sampling import SamplingPlan
from atlas_ab.speculative.timing import StepTimer
from atlas_ab.speculative.verify import CoupledVerify, GreedyVerify, SampledVerify
from atlas_ab.telemetry.events import EventLog
from atlas_ab.telemetry.records import StepBlocks
from atlas_ab.workload.documents import Document


def commit_counts(accepted: np.ndarray, active: np.ndarray, left: np.ndarray) -> np.ndarray:
    """[B] tokens each sequence commits: its accepted drafts and the token after them (the target's,
    recovered or bonus), cut at what its turn still needs (`left`); 0 for inactive sequences."""
    return np.where(active, np.minimum(accepted + 1, left), 0)


def verifier(plan: SamplingPlan | None, target, doc: torch.Tensor, K: int):
    """Greedy verification, live speculative sampling, or its coupled replay (verify.py)."""
    if plan is None:
        return GreedyVerify()
    return SampledVerify(plan, doc, K) if target.live else CoupledVerify(plan, doc, K)


@dataclass
class WaveTrace:
    """What a wave produced: telemetry and each sequence's tokens per turn (for the gate)."""
    steps: StepBlocks
    events: EventLog | None
    generated: list = field(default_factory=list)   # [seq][turn] -> list[int] of G tokens
    n_tokens: int = 0
    pit: list = field(default_factory=list)         # sampled runs: float32 arrays, the PIT of every committed token


class Wave:
    """One wave. `target`: a `targets.LiveTarget` or `targets.ReplayTarget`; `plan`: how a
    sampled run verifies (None: greedy verification)."""

    def __init__(self, target, proposer, arm: ArmConfig, docs: list[Document], gen_tokens: int,
                 fingerprint_rows=None, on_step=None, plan: SamplingPlan | None = None):
        self.target = target
        self.proposer, self.arm = proposer, arm
        self.docs, self.G = docs, gen_tokens
        self.K = arm.num_drafts
        self.on_step = on_step
        B = self.B = len(docs)
        self.turns = len(docs[0].chunks)
        self.doc_ids = np.array([d.doc_id for d in docs], dtype=np.int64)
        budgets = np.array([sum(len(c) for c in d.chunks) + self.turns * gen_tokens + self.K + 2
                            for d in docs], dtype=np.int64)
        self.device, self.dtype = self.target.device, self.target.dtype
        self.target.alloc(budgets)
        proposer.alloc(budgets)
        self.history = np.zeros((B, int(budgets.max()) + 1), dtype=np.int64)  # committed tokens
        self.n_tok = np.zeros(B, dtype=np.int64)     # tokens in history (last one not yet processed)
        self.kv_len = np.zeros(B, dtype=np.int64)    # positions the target has processed
        H = self.target.hidden_size
        self.last_hidden = torch.zeros(B, H, device=self.device, dtype=self.dtype)  # hidden of kv_len-1
        self.ring = Ring(B, arm.ring_size, H, self.device, self.dtype) if arm.has_ring else None
        self.ev = EventLog(fingerprint_rows) if arm.fingerprints_on else None
        self.trace = WaveTrace(StepBlocks(self.K, arm.shadow_topk), self.ev, [[] for _ in range(B)])
        self.timer = StepTimer(self.target.live)   # step_ms, with each kind's warm-up kept apart
        self.turn = 0
        self.verifier = verifier(plan, self.target, self._t(self.doc_ids), self.K)
        self.step_no = np.zeros(B, dtype=np.int64)
        self.gen = np.zeros(B, dtype=np.int64)

    # ------------------------------------------------------------------ run
    @torch.no_grad()
    def run(self) -> WaveTrace:
        for t in range(self.turns):
            self.turn = t
            self._prefill_turn(t)
            while (self.gen < self.G).any():
                self._step(self.gen < self.G)
            for b in range(self.B):
                n = self.n_tok[b]
                self.trace.generated[b].append(self.history[b, n - self.G:n].tolist())
        self.proposer.free()
        self.target.free()
        return self.trace

    def _t(self, x) -> torch.Tensor:
        return torch.as_tensor(x, device=self.device)

    # -------------------------------------------------------- turn prefill
    def _prefill_turn(self, t: int) -> None:
        B = self.B
        for b, d in enumerate(self.docs):
            c = d.chunks[t]
            self.history[b, self.n_tok[b]:self.n_tok[b] + len(c)] = c
            self.n_tok[b] += len(c)
        start = self.kv_len.copy()
        count = self.n_tok - start
        hid, first, u = self.verifier.first(self.target, t, self.history, start, count)
        last = self._t(count - 1)
        ar = torch.arange(B, device=self.device)

        # DRAFTER_PREFILL: context rows keys start-1 .. n_tok-2, i.e. (token k+1,
        # hidden k). OFF keeps the reference engine's behaviour: only a prefill that starts
        # at position 0 (the cold turn) prefills the drafter.
        if self.arm.drafter_prefill or t == 0:
            if self.arm.catchup:   # the ring's rows below key start-1 first: the prefill's rows would pass over them
                self._catchup(np.ones(B, dtype=bool), start, step=-1)
            self._drafter_context(start, count, hid)

        self.last_hidden = hid[ar, last].clone()
        self.kv_len = self.n_tok.copy()
        if self.arm.ring_prefill:
            self._ring_prefill()
        if u is None:
            first = first.cpu().numpy()
        else:          # the drawn token and its PIT, in one read
            first, u = np.split(torch.stack([first.double(), u.double()], 1).cpu().numpy(), 2, axis=1)
            first = first[:, 0].astype(np.int64)
            self.trace.pit.append(u[:, 0].astype(np.float32))
        self.history[np.arange(B), self.n_tok] = first
        self.n_tok += 1
        self.gen[:] = 1
        self.step_no[:] = 0

    def _drafter_context(self, start, count, hid) -> None:
        # Keys from start-1 (it pairs the pending token with the saved hidden),
        # never re-writing a key the drafter already holds. The dense space only
        # appends at slot == key (the reference engine refuses a feed that would leave a
        # hole), so a misaligned dense drafter is left as it is.
        drafter_rows, newest = self.proposer.drafter_rows(), self.proposer.last_pair_key()
        seqs, keys = [], []
        for b in range(self.B):
            k0 = max(start[b] - 1, newest[b] + 1, 0)
            if self.proposer.slot_is_key and drafter_rows[b] != k0:
                continue
            ks = np.arange(k0, start[b] + count[b] - 1)
            seqs.append(np.full(len(ks), b))
            keys.append(ks)
        if not seqs:
            return
        seq = np.concatenate(seqs).astype(np.int64)
        key = np.concatenate(keys).astype(np.int64)
        # hidden of position k: from this prefill, or the saved hidden of start-1
        rel = key - start[seq]
        from_saved = rel < 0
        hiddens = hid[self._t(seq), self._t(np.maximum(rel, 0))]
        if from_saved.any():
            hiddens[self._t(np.nonzero(from_saved)[0])] = self.last_hidden[self._t(seq[from_saved])]
        feed = RowFeed(seq=seq, key=key, token=self.history[seq, key + 1], label=np.full(len(seq), -1),
                       hiddens=hiddens)
        w = self.proposer.prefill_drafter(feed)
        if self.ev is not None and len(w) and w.hiddens is not None:
            self.ev.add("context", doc_id=self.doc_ids[w.seq], turn=self.turn, step=-1, seq=w.seq,
                        rows=w.hiddens, key=w.key, rope=w.rope, slot=w.slot)

    # ----------------------------------------------------------------- step
    def _step(self, active: np.ndarray) -> None:
        self.timer.start()
        B, K, arm = self.B, self.K, self.arm
        n = self.kv_len.copy()                      # position of the last committed token
        pos = n[:, None] + np.arange(K + 1)[None, :]
        # the step's inputs in one host->device copy: last token, verify positions and slots
        inputs = self._t(np.concatenate([self.history[np.arange(B), n][:, None], pos,
                                         np.where(active[:, None], pos, -1)], axis=1))
        last_tok, pos_t, slots_t = inputs[:, 0], inputs[:, 1:K + 2], inputs[:, K + 2:]
        fed = self._catchup(active, n) if arm.catchup else np.zeros(B, dtype=np.int64)
        rows_at_propose = self.proposer.drafter_rows()
        if self.ev is not None:
            self._propose_events(active, n)

        # propose
        draws = self.verifier.draws(self.target, self.turn, pos_t[:, 0])
        prop = self.proposer.propose(self.history, last_tok, self.last_hidden, n, K, active, arm.shadow_topk,
                                     **({"draws": draws} if draws is not None else {}))
        # DRAFT_CONF: a chain below tau is dropped and the step decodes serially.
        gated = (prop.chain_conf < arm.draft_conf) if arm.draft_conf > 0 else torch.zeros(
            B, dtype=torch.bool, device=self.device)
        all_gated = arm.draft_conf > 0 and self._all_gated(gated, active)
        # verify [t_n, d1..dK] at positions n..n+K, and accept
        vtok = torch.cat([last_tok[:, None], prop.drafts], dim=1)
        v = self.verifier.verify(self.target, prop, vtok, pos_t, slots_t, int(n[active].max()) + K + 1, gated,
                                 all_gated, self.turn)
        oracle = self._oracle(prop, v.vh, v.tokens, v.accepted, n, active) if arm.oracle_p2 else None
        h = read_step(acc=v.accepted, gated=gated, drafts=prop.drafts, target=v.tokens, conf=prop.conf,
                      oracle=oracle, topk_ids=prop.topk_ids, topk_probs=prop.topk_probs,
                      accept_prob=v.accept_prob, alpha1=v.alpha1, pit=v.pit)

        # commit: accepted drafts + the target's token after them, cut at the turn's G tokens
        c = commit_counts(h.acc, active, self.G - self.gen)
        rows, cols = np.nonzero(np.arange(K + 1)[None, :] < c[:, None])
        self.history[rows, n[rows] + 1 + cols] = h.target[rows, cols]
        a_eff = np.maximum(c - 1, 0)           # accepted drafts the trajectory kept
        act = np.nonzero(active)[0]
        idx = self._t(np.stack([act, a_eff[act]]))
        self.last_hidden[idx[0]] = v.vh[idx[0], idx[1]]
        self.kv_len = np.where(active, n + c, self.kv_len)
        self.n_tok = np.where(active, self.n_tok + c, self.n_tok)
        self.gen += c
        if self.ring is not None:
            self._ring_after_verify(active, n, a_eff, h.gated, v.vh)
        # dropped (gated) drafts were never verified: their rows go as rejected ones do
        self.proposer.after_verify(np.where(h.gated, 0, a_eff), active)
        self._record(h, act, n, c, rows_at_propose, fed, all_gated)

    def _record(self, h: StepRead, act, n, c, rows_at_propose, fed, serial: bool) -> None:
        """The step's telemetry rows (active sequences) and the running counts."""
        step_ms, warmup_ms = self.timer.stop("serial" if serial else "verify")
        k = np.where(h.gated[act], 0, self.K)
        extra = {}
        if h.oracle is not None:
            extra["oracle"] = h.oracle[act]
        if h.topk_ids is not None:
            extra["topk_ids"], extra["topk_probs"] = h.topk_ids[act], h.topk_probs[act]
        if h.pit is not None:
            extra.update(accept_prob=h.accept_prob[act], alpha1=h.alpha1[act], pit=h.pit[act])
            self.trace.pit.append(h.pit[act][np.arange(self.K + 1)[None, :] < c[act][:, None]])
        self.trace.steps.add(
            doc_id=self.doc_ids[act], turn=np.full(len(act), self.turn), step=self.step_no[act], k=k,
            accept_len=h.acc[act], arm=[self.arm.name], seq=act, position=n[act], drafts=h.drafts[act],
            target=h.target[act], conf=h.conf[act], gated=h.gated[act], n_committed=c[act],
            step_ms=np.full(len(act), step_ms), warmup_ms=np.full(len(act), warmup_ms),
            drafter_rows=rows_at_propose[act], fed_rows=fed[act], **extra)
        self.step_no[act] += 1
        self.trace.n_tokens += int(c.sum())
        if self.on_step is not None:
            self.on_step(int(c.sum()), k, h.acc[act])

    # ------------------------------------------------------------- levers
    def _all_gated(self, gated: torch.Tensor, active: np.ndarray) -> bool:
        """DRAFT_CONF's decision, read before the verify: when every active sequence dropped its
        drafts, the step is a one-token decode, which is what gating saves. The read is the one
        the engine's confidence path pays too (the reference engine's `last_confidence`: a D2H per propose);
        arms with DRAFT_CONF off never make it (the loop's one read per step stands)."""
        return bool(gated.cpu().numpy()[active].all())

    def _catchup(self, active, n, step=None) -> np.ndarray:
        """CATCHUP: feed the gap rows between the drafter's newest row and this
        propose, from the ring (target hiddens), before proposing; or, `step` -1, before
        a turn's drafter prefill, whose first key is n-1."""
        seq, key = gap_keys(self.ring, self.arm.row_space, self.proposer.last_pair_key(),
                            self.proposer.drafter_rows(), n, active)
        fed = np.zeros(self.B, dtype=np.int64)
        if len(key) == 0:
            return fed
        labels = key + 1                          # pair key k reads ring label k+1
        feed = RowFeed(seq=seq, key=key, token=self.history[seq, key + 1], label=labels,
                       hiddens=self.ring.read(seq, labels))
        w = self.proposer.catchup_drafter(feed)
        np.add.at(fed, w.seq, 1)
        if self.ev is not None and len(w):
            self.ev.add("feed", doc_id=self.doc_ids[w.seq], turn=self.turn,
                        step=self.step_no[w.seq] if step is None else np.full(len(w), step),
                        seq=w.seq, rows=w.hiddens, label=w.label, key=w.key, rope=w.rope, slot=w.slot)
        return fed

    def _ring_after_verify(self, active, n, a_eff, gated, vh) -> None:
        """Ring writes after a verify. Serial (gated) steps ring their one hidden
        (CATCHUP); with REFEED every accepted position's true hidden is ringed,
        0..=accepted, the last being the next propose's own target hidden.
        SHIFT moves every re-fed label by s (mapping validation)."""
        A = self.K + 1
        j = np.arange(A)[None, :]
        serial = active & gated                                  # a serial step: ring its hidden (CATCHUP)
        refed = active & ~gated & self.arm.refeed                # REFEED: every accepted position, 0..=accepted
        take = (serial[:, None] & (j == 0)) | (refed[:, None] & (j <= a_eff[:, None]))
        seq, j = np.nonzero(take)
        if len(seq) == 0:
            return
        label = n[seq] + 1 + j + np.where(refed[seq], self.arm.refeed_shift, 0)
        ok = label >= 0
        seq, label, j = seq[ok], label[ok], j[ok]
        src = self._t(np.stack([seq, j]))
        rows = vh[src[0], src[1]]
        dst = self.ring.write(seq, label, rows)
        if self.ev is not None:
            self.ev.add("ring_write", doc_id=self.doc_ids[seq], turn=self.turn, step=self.step_no[seq],
                        seq=seq, rows=rows, rows2=self.ring.hiddens[dst[0], dst[1]], label=label)

    def _ring_prefill(self) -> None:
        """RING_PREFILL: ring the prefill's last hidden (position P-1, P = the turn's first
        generated position) under its label P. The turn's first propose pairs it with
        key P-1 (row 0); when that propose is rejected outright, the compact row space
        trims the row, and without this write no ring label could rebuild it."""
        seq = np.arange(self.B)
        label = self.kv_len.copy()                # label n holds the hidden of position n-1
        rows = self.last_hidden[self._t(seq)]     # a gather: last_hidden changes in place later
        dst = self.ring.write(seq, label, rows)
        if self.ev is not None:
            self.ev.add("ring_write", doc_id=self.doc_ids, turn=self.turn, step=-1, seq=seq, rows=rows,
                        rows2=self.ring.hiddens[dst[0], dst[1]], label=label)

    def _oracle(self, prop, vh, target, acc, n, active):
        """ORACLE_P2: when draft 1 is accepted, would draft 2 from the target's
        true hidden of position n have hit? Null (masked) otherwise."""
        o2 = self.proposer.oracle_draft2(prop.drafts[:, 0], vh[:, 0], n, prop.row0_slot, active)
        return torch.where(acc >= 1, (o2 == target[:, 1]).long(), torch.full_like(acc, -1))

    def _propose_events(self, active, n) -> None:
        act = np.nonzero(active)[0]
        if self.ring is not None:
            live = self.ring.live(act, n[act])
            idx = self.ring.index(act, n[act])          # one copy serves both gathers
            rows, ring_rows = self.last_hidden[idx[0]], self.ring.hiddens[idx[0], idx[1]]
        else:
            live = np.zeros(len(act), bool)
            rows = self.last_hidden[self._t(act)]
            ring_rows = torch.zeros_like(rows)
        self.ev.add("propose", doc_id=self.doc_ids[act], turn=self.turn, step=self.step_no[act], seq=act,
                    rows=rows, rows2=ring_rows, fp2_valid=live, position=n[act])

