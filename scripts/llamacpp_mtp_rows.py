"""Which MTP rows make llama.cpp's draft-mtp differ from our `prefill_refeed` arm? Our wave with
llama.cpp's rows added, one difference at a time, against llama.cpp's collected counts.

    python scripts/llamacpp_mtp_rows.py ENGINE_RUN [--json]

ENGINE_RUN: the collector's run against `llama-server -m target_mtp.gguf --spec-type draft-mtp
--parallel 1`, `--token-ids --concurrency 1` over the default workload, K = 2. llama.cpp writes
every processed position p as the row (token p, target hidden p-1) at RoPE p
(common/speculative.cpp `common_speculative_impl_draft_mtp::process`); position 0 pairs token 0
with `pending_h`, which starts at zero and is not reset between requests (`begin`), so a slot
that moves to the next document carries the previous one's hidden of its last processed position.
Served one document after the other, document d's row 0 holds zeros for d = 0, else document
d-1's target hidden at its last position but one.

llama-server reuses a cached prompt through a context checkpoint where the model has
sliding-window layers (the trunk as MiMo-V2 declares them all; tools/server/server-context.cpp,
"restored context checkpoint"): every warm turn re-processes from position c = `timings.cache_n`,
here 5 tokens before the end of the previous turn's prompt, and that batch's first row pairs token c with
`pending_h`, the hidden the slot processed last (the previous request's last position but one),
not with hidden c-1. The collector's greedy probe makes document 0's turn 0 one such request too.

Our arm `prefill_refeed` (DRAFTER_PREFILL, CATCHUP, REFEED) writes the rest of that policy. This
script runs the arm over the same documents as is, with the row at position 0 (zeros; as
llama.cpp's served order leaves it), with the restore row (key c-1 rewritten with that hidden),
and with both. Each is counted as the server counts (scripts/llamacpp_compare.py, "budgeted")
and compared with the engine request by request, over the requests whose prompt and tokens agree.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def budgeted(table, K: int, G: int) -> dict:
    t = table.select(["doc_id", "turn", "step", "k", "accept_len", "committed"]).to_pandas()
    out = {}
    for (d, tu), g in t.sort_values(["doc_id", "turn", "step"]).groupby(["doc_id", "turn"]):
        gen, dr, ac = 1, 0, 0
        for a, c in zip(g["accept_len"], g["committed"]):
            keff = max(min(K, G - gen - 1), 0)
            dr, ac, gen = dr + keff, ac + min(int(a), keff), gen + len(c)
        out[(int(d), int(tu))] = (dr, ac)
    return out


def main(argv: list[str] | None = None) -> int:
    import torch
    from llamacpp_compare import engine_side

    from atlas_ab.config.structured import ArmConfig, SamplingConfig, WorkloadConfig
    from atlas_ab.proposers.base import RowFeed
    from atlas_ab.proposers.mtp_head import MTPProposer
    from atlas_ab.runtime.checkpoint import load
    from atlas_ab.speculative.loop import Wave
    from atlas_ab.speculative.targets import LiveTarget
    from atlas_ab.speculative.trajectory import greedy
    from atlas_ab.workload.documents import build_workload

    ap = argparse.ArgumentParser(prog="llamacpp_mtp_rows.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("engine", type=Path)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    me = json.loads((a.engine / "manifest.json").read_text())
    model = ROOT / "atlas_ab" / "models" / "default"
    cfg = dict(me["workload"]["config"])
    cfg["sampling"] = SamplingConfig(**(cfg.get("sampling") or {}))
    wl = build_workload(WorkloadConfig(**cfg), model / "tokenizer.json")
    if wl.hash != me["workload"]["hash"]:
        print(f"llamacpp_mtp_rows.py: error: {a.engine} ran another workload", file=sys.stderr)
        return 2
    K, G = 2, wl.gen_tokens
    ck = load(model, device="cpu", dtype=torch.float32)
    trunk = ck.trunk.eval()
    traj = greedy(trunk, wl.docs, G, keep_hiddens=True)
    last = traj.turn_end[:, -1]          # each document's last generated position
    H = trunk.args.hidden_size
    served = torch.stack([torch.zeros(H)] + [traj.hiddens[b - 1, last[b - 1] - 1] for b in range(1, len(wl.docs))])
    arm = ArmConfig(name="prefill_refeed", num_drafts=K, drafter_prefill=True, catchup=True, refeed=True,
                    fingerprints=False)

    raw = [json.loads(x) for x in (a.engine / "raw" / "responses.jsonl").read_text().splitlines()]
    restart = {(r["doc_id"], r["turn"]): int(r["response"]["timings"].get("cache_n", 0)) for r in raw}
    ends = traj.turn_end

    def run(row0, restore):
        class Row0Wave(Wave):
            def _prefill_turn(self, t):
                if t == 0 and row0 is not None:    # pair key -1: token 0 at RoPE 0 (compact space)
                    B = self.B
                    self.proposer.prefill_drafter(RowFeed(
                        seq=np.arange(B), key=np.full(B, -1), token=np.array([d.chunks[0][0] for d in self.docs]),
                        label=np.full(B, -1), hiddens=row0.to(self.dtype)))
                super()._prefill_turn(t)
                if restore:
                    self._restore_rows(t)

            def _restore_rows(self, t):
                """Key c-1 (token c at RoPE c) rewritten in place with the slot's last hidden."""
                p, B = self.proposer, self.B
                tok, rope, slot = (np.full((B, 1), v, dtype=np.int64) for v in (0, 0, -1))
                hid = torch.zeros(B, 1, H, dtype=self.dtype)
                for b, d in enumerate(self.docs):
                    c = restart[(int(d.doc_id), t)]
                    if c <= 0:
                        continue
                    (s,) = np.nonzero(p.row_key[b, :p.rows[b]] == c - 1)[0]
                    tok[b, 0], rope[b, 0], slot[b, 0] = self.history[b, c], c, s
                    # the previous request's: turn t-1, or at turn 0 the probe (this same request)
                    hid[b, 0] = traj.hiddens[b, ends[b, max(t - 1, 0)] - 1]
                if (slot >= 0).any():
                    p.write_rows(torch.as_tensor(tok), hid, torch.as_tensor(rope),
                                 torch.as_tensor(slot), int(p.rows.max()))
        proposer = MTPProposer(trunk, ck.mtp, "compact", refeed=True, handoff_norm="pre", recycle_norm="pre")
        with torch.no_grad():
            return budgeted(Row0Wave(LiveTarget(trunk), proposer, arm, wl.docs, G).run().steps.table(), K, G)

    eng = {k: v[1] for k, v in engine_side(a.engine).items()}
    same_tokens = {k for k, (toks, _) in engine_side(a.engine).items()
                   if toks == traj.generated()[int(np.nonzero(traj.doc_ids == k[0])[0][0])][k[1]]}
    result = {}
    variants = (("as is", None, False), ("row 0 zero", torch.zeros(len(wl.docs), H), False),
                ("row 0 as served", served, False), ("restore row", None, True),
                ("restore row + row 0", served, True))
    for name, row0, restore in variants:
        ours = run(row0, restore)
        keys = sorted(k for k in same_tokens if all((k[0], t) in same_tokens for t in range(k[1] + 1)))
        result[name] = {"requests": len(keys), "same_counts": sum(ours[k] == eng[k] for k in keys),
                        "ours": [int(sum(ours[k][i] for k in keys)) for i in (0, 1)],
                        "engine": [int(sum(eng[k][i] for k in keys)) for i in (0, 1)],
                        "differ": [[*k, *ours[k], *eng[k]] for k in keys if ours[k] != eng[k]]}
    if a.json:
        print(json.dumps(result, indent=1))
    else:
        for name, r in result.items():
            print(f"{name:20s} same counts {r['same_counts']} / {r['requests']}; drafted, accepted: ours {r['ours']}, "
                  f"llama.cpp {r['engine']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
