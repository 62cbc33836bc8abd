"""The speculative step on the device: feed the catch-up rows, propose K drafts, verify them,
accept a prefix, and do the device half of the commit (the next propose's hidden, the ring writes).

Start here. A step reads like gpt-fast's `speculative_decode`: the drafter proposes K drafts after
the last committed token, the target verifies [t_n, d1 .. dK] at positions n .. n+K in one forward,
the longest prefix of drafts equal to the target's own tokens is accepted (verify.py: greedy;
speculative sampling or its coupled replay under `runner.sampling`), and the accepted drafts plus
the target's token after them are committed. `DeviceStep` holds what the step reads and writes on
the device (the verifier, the proposer, the next propose's hidden, the ring) and reads no host
state: its input is the step's plan, packed (host_io.py), its output one packed read. The wave
(loop.py) plans it and commits it; at static shapes it is one CUDA graph (runtime/graphs.py).

Vocabulary
  B       sequences in the wave (its batch); every tensor's first dimension
  K       drafts a step proposes (`arm.num_drafts`); the verify runs K+1 positions
  G       tokens a turn generates per sequence (`workload.gen_tokens`)
  H       the target's hidden size
  R       the ring's capacity in labels (`arm.ring_size`; its tensors hold R+1: a dump row)
  W       catch-up rows a step feeds (CATCHUP; a fixed width at static shapes)
  X       a packed tensor's columns (the plan's, or the read's: host_io.py)
  turn    the turn's index (a sampled run keys its uniforms with it; a greedy step ignores it)
  n       a sequence's position: its last committed token's, where the verify starts
  key     a drafter row's pair key k: the row pairs token k+1 with the target hidden of position k
  label   a ring slot's name: label L holds the target hidden of position L-1 (key k reads label k+1)
  row     one drafter KV row (a key's token and hidden, at a KV slot)
  plan    the step's int64 arrays by name (positions, KV slots, what the turn still needs, the
          catch-up rows), made on the host or (run-ahead) on the device; `a`: them laid out
  read    the step's outputs packed into one int64 [B, X] tensor, the host's one read of it
  gated   DRAFT_CONF dropped the sequence's drafts (its chain confidence was below tau)
  n_valid a row's real drafts, where its family's K varies per step (n-gram, suffix: `Proposal.n_valid`):
          no draft past them is accepted, and the row's `k` is it (0: a plain decode for the row)
  probe   what watches the step (step_probe.py): called at fixed points, a no-op unless a lever
          records (FINGERPRINTS: step_events.py); `taken`: what it took of the propose
  length  KV read lengths by name ("verify", "catchup", the drafter's): the step's own in eager
          mode, the pools' full lengths at static shapes

Levers on the step: CATCHUP (`feed_rows`), REFEED and SHIFT (`ring_take`), DRAFT_CONF (`gated`,
and `propose` / `verify` as two graphs), SHADOW_TOPK (`proposer.draft`'s topk), ORACLE_P2
(`oracle`), FINGERPRINTS (the probe: step_events.py), TREE (`verify_tree`: a static draft tree
verified in one forward, then read as the linear step of its accepted path).
"""
from __future__ import annotations

import functools

import torch

from atlas_ab.config.tree import parse_tree
from atlas_ab.proposers.base import Proposal
from atlas_ab.runtime.fusion import fused
from atlas_ab.speculative import tree_sampling
from atlas_ab.speculative.host_io import pack_read, unpack_plan
from atlas_ab.speculative.step_probe import NO_PROBE
from atlas_ab.speculative.tree_accept import as_linear, tree_tensors
from atlas_ab.speculative.tree_step import verify_tree
from atlas_ab.speculative.verify import Verified


def commit_counts(accepted: torch.Tensor, left: torch.Tensor) -> torch.Tensor:
    """[B] tokens each sequence commits: its accepted drafts and the token after them (the target's,
    recovered or bonus), cut at what its turn still needs (`left`: 0 for an inactive sequence)."""
    return torch.minimum(accepted + 1, left)


class DeviceStep:
    """The step's device half. `fuse`: its bookkeeping regions run compiled (runtime/fusion.py);
    `probe`: what watches the step (step_probe.py; the wave's)."""

    def __init__(self, target, proposer, verifier, arm, last_hidden: torch.Tensor, ring, fuse: bool,
                 probe=NO_PROBE):
        self.target, self.proposer, self.verifier, self.arm = target, proposer, verifier, arm
        self.B, self.K = last_hidden.shape[0], arm.num_drafts
        # TREE: the static tree (validate_arm: K is its depth) and its arrays on the device
        self.tree = parse_tree(arm.tree) if arm.tree is not None else None
        self.tt = tree_tensors(self.tree, last_hidden.device) if self.tree is not None else None
        # a sampled tree arm's walk reads these constants (made here: a captured step copies nothing in)
        self.tree_sampling = tree_sampling.tables(self.tree, last_hidden.device) \
            if self.tree is not None and verifier.sampled else None
        self.last_hidden = last_hidden            # [B, H]: the next propose's target hidden (of n)
        self.ring = ring                          # proposers/ring.py `Ring` [B, R+1, H], or None
        self.fuse = fuse
        self.probe = probe

    def pools(self) -> list[torch.Tensor]:
        """The target's and the drafter's KV pools, as a step graph reads them by address."""
        pools = [p for p in (getattr(self.target, "kv", None), self.proposer.kv) if p is not None]  # replay: no KV
        return [t for p in pools for t in (p.k, p.v, p.base, p.capacity)]

    def state(self) -> list[torch.Tensor]:
        """What the step writes besides the KV rows (the next propose's hidden, the ring's rows and
        its label mirror)."""
        ring = [] if self.ring is None else [t for t in (self.ring.hiddens, self.ring.mirror) if t is not None]
        return [self.last_hidden] + ring

    def __call__(self, x: torch.Tensor, layout, length, turn: int, a: dict | None = None):
        """The whole step at static shapes (one graph): x [B, X] the packed plan (a: its arrays laid
        out, where the caller has them). In order:
          a          the plan by name: last_tok [B], pos and vslot [B, K+1], left [B], cu_* [B, W], ...
          propose    CATCHUP's rows into the drafter, then drafts [B, K] after last_tok and last_hidden
          verify     the target over [t_n, d1..dK] at pos: vh [B, K+1, H], tokens [B, K+1] and
                     accepted [B], the longest prefix of drafts equal to the target's tokens
          accept     committed [B] = min(accepted + 1, left); last_hidden := vh at the last kept
                     depth; the ring's writes (REFEED, SHIFT, CATCHUP's serial steps)
          pack_read  every number the host needs, one int64 [B, X'] (host_io.py)
        Returns the packed read, its layout and vh, the probe's side work joined."""
        out = self.run(x, layout, length, turn, a)
        self.probe.join()
        return out

    def run(self, x: torch.Tensor, layout, length, turn: int, a: dict | None = None):
        """`__call__` with the probe's side work left running (the caller joins it)."""
        a = self.plan_arrays(x, layout, fuse=self.fuse) if a is None else a
        prop, gated, taken = self._propose(x, layout, length, turn, a)
        return self._verify(x, layout, prop, gated, False, length, turn, taken, a)

    def propose(self, x, layout, length, turn: int, a: dict | None = None):
        """DRAFT_CONF's first graph: `_propose`, the probe's side work joined."""
        out = self._propose(x, layout, length, turn, a)
        self.probe.join()
        return out

    def verify(self, x, layout, prop, gated, all_gated: bool, length, turn: int, taken=None, a: dict | None = None):
        """DRAFT_CONF's second graph: `_verify`, the probe's side work joined."""
        out = self._verify(x, layout, prop, gated, all_gated, length, turn, taken, a)
        self.probe.join()
        return out

    def _propose(self, x, layout, length, turn: int, a: dict | None = None):
        """Catch-up rows, then K drafts; returns the Proposal (drafts [B, K], conf [B, K], ...),
        DRAFT_CONF's gate [B] bool and what the probe took of the propose (`taken`)."""
        a = self.plan_arrays(x, layout, fuse=self.fuse) if a is None else a
        n = a["pos"][:, 0]                                                              # [B]
        fed = self.feed_rows(a, length["catchup"]) if "cu_tok" in a else None          # [B, W, H]
        taken = self.probe.propose(n, fed)
        if self.tree is not None:                  # TREE: the nodes' drafts (node 0: t_n), conf per node
            nodes, conf = self.proposer.draft_tree(a, a["last_tok"], self.last_hidden, self.tree, length)
            return Proposal(drafts=nodes[:, 1:], conf=conf, topk_ids=None, topk_probs=None), \
                torch.zeros(self.B, dtype=torch.bool, device=x.device), taken
        draws = self.verifier.draws(self.target, turn, n)
        prop = self.proposer.draft(a, a["last_tok"], self.last_hidden, self.K, self.arm.shadow_topk, draws, length)
        tau = self.arm.draft_conf
        gated = prop.chain_conf < tau if tau > 0 else torch.zeros(self.B, dtype=torch.bool, device=x.device)  # [B]
        return prop, gated, taken

    def feed_rows(self, a: dict, length: int) -> torch.Tensor:
        """CATCHUP: the planned catch-up rows (cu_tok, cu_rope, cu_slot, cu_label [B, W]) written to
        the drafter, their hiddens read from the ring; returns those hiddens [B, W, H]."""
        hid = self.ring.hiddens[torch.arange(self.B, device=self.last_hidden.device)[:, None],
                                a["cu_label"].remainder(self.ring.capacity)]          # [B, W, H]
        self.proposer.write_rows(a["cu_tok"], hid, a["cu_rope"], a["cu_slot"], length)
        return hid

    def _verify(self, x, layout, prop, gated, all_gated: bool, length, turn: int, taken=None, a: dict | None = None):
        """Verify and accept, then the device half of the commit; returns the packed read, its
        layout and the verify's hiddens [B, K+1, H]. all_gated: every active sequence dropped its
        drafts (DRAFT_CONF), so the verify is a one-token decode. taken: what the probe took of the
        propose; the probe fills its read columns once the read is packed."""
        a = self.plan_arrays(x, layout, fuse=self.fuse) if a is None else a
        vtok = torch.cat([a["last_tok"][:, None], prop.drafts], dim=1)                  # [B, K+1] (a tree: [B, N+1])
        path = None
        if self.tree is not None:                  # TREE: verified, walked, compacted; then read as a linear step
            v, prop, path = self.verify_tree(prop, vtok, a, length["verify"], turn)
        else:
            v = self.verifier.verify(self.target, prop, vtok, a["pos"], a["vslot"], length["verify"], gated,
                                     all_gated, turn)                                    # vh [B, K+1, H]
        if prop.n_valid is not None:               # a variable K: no draft past the row's real ones is accepted
            v.accepted = torch.minimum(v.accepted, prop.n_valid)
        self.probe.join()          # the probe is done with the propose's rows: last_hidden and the ring may move on
        c, label, take, ring_label = self.accept(a["left"], a["pos"][:, 0], v.accepted, v.vh, gated,
                                                 fuse=self.fuse)                         # [B]; [B, K+1] x3
        ring = self.ring is not None
        slot = self.ring.write_masked(label, take, v.vh) if ring else None              # [B, K+1]
        late = self.probe.read_columns(taken)                                           # [B, S] or None
        oracle = self.oracle(prop, v, a, length) if self.arm.oracle_p2 else None        # [B]
        packed, read_layout = pack_read(fuse=self.fuse, acc=v.accepted, gated=gated, drafts=self.shown(prop),
                                        target=v.tokens, conf=prop.conf, committed=c, ring_label=ring_label,
                                        oracle=oracle, topk_ids=prop.topk_ids, topk_probs=prop.topk_probs,
                                        accept_prob=v.accept_prob, alpha1=v.alpha1, pit=v.pit, fp=late,
                                        tree_path=path, n_valid=prop.n_valid)
        self.probe.verify(taken, packed, read_layout, v.vh, slot)
        return packed, read_layout, v.vh

    @staticmethod
    def shown(prop: Proposal) -> torch.Tensor:
        """The drafts as the read records them: -1 past a row's real ones (a variable K pads them)."""
        if prop.n_valid is None:
            return prop.drafts
        real = torch.arange(prop.drafts.shape[1], device=prop.drafts.device)[None, :] < prop.n_valid[:, None]
        return torch.where(real, prop.drafts, -1)

    def verify_tree(self, prop, nodes, a: dict, length: int, turn: int = 0):
        """TREE: the tree's verify (`tree_step.verify_tree`: every node under the tree mask, the
        greedy walk or, sampled, tree_sampling's walk; both KVs compacted; replay: the drafter's),
        returned as a K-chain's: the Verified along the accepted path continued by rank-0 children
        (`tree_accept.linear_view`: [B, K+1] tokens and hiddens, K the tree's depth; sampled, with
        its accept_prob, alpha1 and PIT), the Proposal of its drafts and confidences ([B, K]; -1
        and 0 where the tree has no rank-0 child) and the accepted path [B, K+1]."""
        sampler = None
        if self.tree_sampling is not None:
            sampler = functools.partial(self.verifier.sample_tree, tables=self.tree_sampling, n=a["pos"][:, 0],
                                        turn=turn)
        s = verify_tree(self.target, self.proposer, self.tree, self.tt, nodes, a["pos"], a["vslot"], length,
                        a["d_slot"][:, 0], sampler)
        conf = torch.cat([torch.ones_like(prop.conf[:, :1]), prop.conf], dim=1)          # [B, N+1] (root: 1)
        lin = Proposal(drafts=as_linear(s.view, nodes, fill=-1)[:, 1:], conf=as_linear(s.view, conf, fill=0.0)[:, 1:],
                       topk_ids=None, topk_probs=None)
        v = Verified(vh=s.vh, tokens=s.tokens, accepted=s.accepted)
        if s.sampled is not None:   # a tree step is never gated (DRAFT_CONF is off): every depth as the walk gives it
            v.accept_prob, v.alpha1, v.pit = s.sampled.accept_prob, s.sampled.alpha1, s.sampled.pit
        return v, lin, s.path

    @fused
    def accept(self, left, n, accepted, vh, gated) -> tuple:
        """The commit's device half (left, n, accepted, gated [B]; vh [B, K+1, H]): the tokens
        committed c [B], the next propose's hidden (the last kept position's, into last_hidden)
        and, with a ring, the label each depth's hidden goes to, whether it goes, and the label as
        read (-1 where not) ([B, K+1] each: `ring_take`; None without a ring). The ring's write
        itself is outside (`Ring.write_masked`)."""
        active = left > 0                                                              # [B]
        c = commit_counts(accepted, left)                                              # [B]
        a_eff = (c - 1).clamp(min=0)                                                   # [B] drafts kept
        ar = torch.arange(self.B, device=vh.device)
        self.last_hidden.copy_(torch.where(active[:, None], vh[ar, a_eff], self.last_hidden))
        if self.ring is None:
            return c, None, None, None
        label, take = self.ring_take(active, n, a_eff, gated)
        return c, label, take, torch.where(take, label, -1)

    def ring_take(self, active, n, a_eff, gated) -> tuple:
        """The ring's writes after a verify (all inputs [B]). Serial (gated) steps ring their one
        hidden (CATCHUP); REFEED rings every accepted position's true hidden, 0..=accepted, the
        last being the next propose's own target hidden; SHIFT moves every re-fed label by s
        (mapping validation). Returns the label of each depth's hidden and whether it is
        written, [B, K+1] each."""
        j = torch.arange(self.K + 1, device=n.device)[None, :]                          # [1, K+1]
        serial = active & gated                                  # a serial step: ring its hidden (CATCHUP)
        refed = active & ~gated & self.arm.refeed                # REFEED: every accepted position, 0..=accepted
        take = (serial[:, None] & (j == 0)) | (refed[:, None] & (j <= a_eff[:, None]))  # [B, K+1]
        label = n[:, None] + 1 + j + refed[:, None].long() * self.arm.refeed_shift     # [B, K+1]
        return label, take & (label >= 0)

    def oracle(self, prop, v, a: dict, length) -> torch.Tensor:
        """ORACLE_P2 [B]: when draft 1 is accepted, would draft 2 from the target's true hidden of
        position n have hit (1 / 0)? -1 otherwise."""
        o2 = self.proposer.oracle_draft2(prop.drafts[:, 0], v.vh[:, 0], a, length)   # [B]
        return torch.where(v.accepted >= 1, (o2 == v.tokens[:, 1]).long(), -1)

    def laid_out(self, a: dict) -> dict:
        """The plan's arrays as the step's forwards read them, so that none of them copies one:
        each contiguous, and the drafter's per-depth arrays (its `per_depth`) with the batch
        innermost, so a depth's column is one contiguous [B] (views of the packed plan cost copy
        kernels in the step: bench/bench_step_kernels.py)."""
        return {k: v.t().contiguous().t() if k in self.proposer.per_depth else v.contiguous() for k, v in a.items()}

    @fused
    def plan_arrays(self, x: torch.Tensor, layout) -> dict:
        """The packed plan x [B, X] by name (`unpack_plan`), laid out (`laid_out`)."""
        return self.laid_out(unpack_plan(x, layout))
