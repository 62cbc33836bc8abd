"""Our run against llama.cpp's, request by request: the completions and the drafted/accepted counts.

    python scripts/llamacpp_compare.py OUR_RUN ENGINE_RUN [--json] [--list N]

OUR_RUN is `python -m atlas_ab +arm=draft_model` (or an MTP arm), ENGINE_RUN the collector's run
of the same workload against llama-server (`--token-ids`, so both sides saw the same tokens).
A request is one (doc_id, turn). Per request:

  completion  llama.cpp's G reply tokens vs our target's greedy G tokens (atlas_ab's
              `trajectory.greedy` in fp32: the text every live arm commits, checked against
              the run's own committed tokens); where they first differ, the margin (top-1 minus
              top-2 logit) of our argmax there says whether it was a near-tie.
  counts      drafted / accepted: ours as the run recorded them (every step drafts K; a step at
              a turn's end counts every accepted draft) and "budgeted", the same steps counted as
              llama.cpp counts them: the server drafts at most n_remaining - 1 tokens
              (tools/server/server-context.cpp `get_n_draft_max`, n_remaining = max_tokens -
              tokens generated), and none with one token left, so a step that generated g
              tokens before it has k = min(K, G - g - 1) and accepts min(accept_len, k)
              (ingest/llamacpp.server_counts).

The numbers are the script's, the verdict is the reader's: where counts differ on a request
whose completion agrees, the two drafters proposed different tokens (the draft model's own near
ties) or drafted a different number of them.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

PROG = "llamacpp_compare.py"


@dataclass
class Request:
    doc_id: int
    turn: int
    same_context: bool                # every earlier turn of the document came out the same
    same_completion: bool
    first_diff: int | None            # index into the turn's G tokens
    margin: float | None              # our top-1 minus top-2 logit at first_diff
    ours: tuple[int, int]             # drafted, accepted as recorded
    ours_budgeted: tuple[int, int]    # drafted, accepted counted as llama.cpp counts
    engine: tuple[int, int]           # timings.draft_n, timings.draft_n_accepted


@dataclass
class Comparison:
    requests: list[Request]
    K: int
    G: int
    run_matches_reference: bool       # our run committed exactly the reference greedy tokens
    totals: dict = field(default_factory=dict)

    def summarize(self) -> Comparison:
        rs = self.requests

        def tot(f, i):
            return int(sum(getattr(r, f)[i] for r in rs))

        same = [r for r in rs if r.same_completion and r.same_context]
        roots = [r for r in rs if r.same_context and not r.same_completion]
        self.totals = {
            "requests": len(rs), "same_context": sum(r.same_context for r in rs), "same_completion": len(same),
            # where the prompts were the same and the completions were not: the margins there
            "divergences": [{"doc_id": r.doc_id, "turn": r.turn, "at": r.first_diff, "margin": r.margin}
                            for r in roots],
            "ours": {"drafted": tot("ours", 0), "accepted": tot("ours", 1)},
            "ours_budgeted": {"drafted": tot("ours_budgeted", 0), "accepted": tot("ours_budgeted", 1)},
            "engine": {"drafted": tot("engine", 0), "accepted": tot("engine", 1)},
            "same_counts": sum(r.ours_budgeted == r.engine for r in rs),
            "same_counts_where_same_completion": sum(r.ours_budgeted == r.engine for r in same),
        }
        return self

    def to_dict(self) -> dict:
        return {"K": self.K, "G": self.G, "run_matches_reference": self.run_matches_reference,
                "totals": self.totals, "requests": [asdict(r) for r in self.requests]}

    def lines(self, n_list: int = 10) -> list[str]:
        t = self.totals
        def rate(d):
            return f"{d['accepted']:,} / {d['drafted']:,} = {d['accepted'] / max(d['drafted'], 1):.4f}"

        out = [f"requests {t['requests']}, K={self.K}, G={self.G}",
               (f"same completion        {t['same_completion']} / {t['requests']}"
                f" (our run == our greedy reference: {self.run_matches_reference}; the other "
                f"{t['requests'] - t['same_context']} followed a divergence in an earlier turn)"),
               (f"accepted / drafted     ours {rate(t['ours'])}; ours budgeted {rate(t['ours_budgeted'])}; "
                f"llama.cpp {rate(t['engine'])}"),
               (f"same counts            {t['same_counts']} / {t['requests']} "
                f"({t['same_counts_where_same_completion']} / {t['same_completion']} where the completion agrees)")]
        for d in t["divergences"]:
            out.append(f"divergence: doc {d['doc_id']} turn {d['turn']} at token {d['at']}, our top-1 - top-2 "
                       f"logit there {d['margin']}")
        bad = [r for r in self.requests if not r.same_completion or r.ours_budgeted != r.engine]
        for r in bad[:n_list]:
            what = "same" if r.same_completion else f"differs at {r.first_diff}"
            ctx = "" if r.same_context else " (after an earlier divergence)"
            out.append(f"  doc {r.doc_id} turn {r.turn}: completion {what}{ctx}; drafted, accepted: ours budgeted "
                       f"{r.ours_budgeted}, llama.cpp {r.engine} (ours recorded {r.ours})")
        return out


def fail(msg: str) -> None:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    sys.exit(2)


def _manifest(run: Path) -> dict:
    p = run / "manifest.json"
    if not p.is_file():
        fail(f"{run}: no manifest.json")
    m = json.loads(p.read_text())
    if m.get("status") != "complete":
        fail(f"{run}: status {m.get('status')!r}, a complete run expected")
    return m


def our_counts(run: Path, m: dict, K: int, G: int) -> tuple[dict, dict]:
    """(doc, turn) -> (recorded, budgeted) counts, and (doc, turn) -> the G-1 tokens the steps committed."""
    import pyarrow.parquet as pq
    t = pq.read_table([str(run / s["steps"]) for s in m["shards"]],
                      columns=["doc_id", "turn", "step", "k", "accept_len", "committed"]).to_pandas()
    from atlas_ab.ingest.llamacpp import server_counts

    counts, committed = {}, {}
    for (d, tu), g in t.sort_values(["doc_id", "turn", "step"]).groupby(["doc_id", "turn"]):
        rec = (int(g["k"].sum()), int(g["accept_len"].sum()))
        _, *bud = server_counts([(K, a, len(c)) for a, c in zip(g["accept_len"], g["committed"])], G)
        counts[(int(d), int(tu))] = (rec, tuple(bud))
        committed[(int(d), int(tu))] = [int(x) for c in g["committed"] for x in c]
    return counts, committed


def engine_side(run: Path) -> dict:
    out = {}
    for line in (run / "raw" / "responses.jsonl").read_text().splitlines():
        r = json.loads(line)
        resp = r.get("response") or {}
        if "tokens" not in resp:
            fail(f"{run}: collected without --token-ids (no reply tokens): the completions cannot be compared")
        t = resp.get("timings") or {}
        out[(r["doc_id"], r["turn"])] = (resp["tokens"], (int(t.get("draft_n", 0)), int(t.get("draft_n_accepted", 0))))
    return out


def reference(m: dict):
    """Our target's greedy tokens and margins for the run's documents, fp32 on the CPU
    (atlas_ab/engines/reference.py, which the vLLM comparison reads too)."""
    from atlas_ab import AtlasError
    from atlas_ab.engines.reference import ours
    try:
        return ours(m)
    except AtlasError as e:
        fail(str(e))


def compare(ours: Path, engine: Path) -> Comparison:
    mo, me = _manifest(ours), _manifest(engine)
    if mo["workload"]["hash"] != me["workload"]["hash"]:
        fail(f"different workloads: {ours} has {mo['workload']['hash']}, {engine} {me['workload']['hash']}")
    K, G = int(mo["levers"]["num_drafts"]), int(mo["config"]["workload"]["gen_tokens"])
    counts, committed = our_counts(ours, mo, K, G)
    eng = engine_side(engine)
    if set(eng) != set(counts):
        fail(f"the runs hold different requests: {len(counts)} ours, {len(eng)} llama.cpp's")
    ref, margins = reference(mo)
    reqs, diverged = [], set()
    for key in sorted(counts):
        toks, ecounts = eng[key]
        diff = next((i for i, (a, b) in enumerate(zip(ref[key], toks)) if a != b),
                    None if len(toks) == len(ref[key]) else min(len(toks), len(ref[key])))
        same_context = key[0] not in diverged
        if diff is not None:
            diverged.add(key[0])
        reqs.append(Request(key[0], key[1], same_context, diff is None, diff,
                            None if diff is None or diff >= len(margins[key]) else round(margins[key][diff], 6),
                            counts[key][0], counts[key][1], ecounts))
    matches = all(committed[k] == ref[k][1:] for k in counts)
    return Comparison(reqs, K, G, matches).summarize()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("ours", type=Path)
    ap.add_argument("engine", type=Path)
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--list", type=int, default=10, help="requests that differ to list (text output)")
    a = ap.parse_args(argv)
    c = compare(a.ours, a.engine)
    print(json.dumps(c.to_dict(), indent=1) if a.json else "\n".join(c.lines(a.list)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
