"""Our run against vLLM's, request by request and verify step by verify step.

    python -m atlas_ab.engines.vllm.compare OUR_RUN VLLM_RUN [--hf MODEL_DIR] [--json]

OUR_RUN is our runner on the same documents (on the exported MiMo directory with `+arm=vllm_mtp`,
vLLM's drafter and its schedule: then every step agrees), VLLM_RUN the collector's run against
`python -m atlas_ab.engines.vllm serve` with `--token-ids --ignore-eos` (both sides see the same
tokens; a reply is G tokens). A request is one (doc_id, turn).

  completions  vLLM's G reply tokens against transformers' greedy decoding of the checkpoint
               (--hf, default the run's model) from the prompt ids vLLM echoed, and against our
               run's committed tokens (the turn's prefill token + every step's committed);
               where they first differ, transformers' top-1 minus top-2 logit there
  steps        our accept_len against vLLM's per_step_accepted at the same (doc_id, turn,
               position); where they differ and our run kept the drafter's top-k
               (arm.shadow_topk >= 2), the drafter's top-1 minus top-2 probability at the
               draft that decided it: a near-tie between two fp32 drafters, or not
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.engines import reference as ref

PROG = "atlas_ab.engines.vllm.compare"


@dataclass
class StepDiff:
    doc_id: int
    turn: int
    position: int
    ours: int                       # accept_len
    vllm: int
    depth: int                      # the first draft (1-based) whose acceptance differs
    draft_margin: float | None      # our drafter's top-1 minus top-2 probability at that draft


@dataclass
class Comparison:
    K: int
    G: int
    requests: int
    same_vs_transformers: int       # vLLM's completion == transformers' greedy
    same_vs_ours: int               # vLLM's completion == our run's committed tokens
    ours_vs_transformers: int
    divergences: list = field(default_factory=list)   # {doc_id, turn, at, margin}
    steps_both: int = 0             # steps at the same (doc, turn, position) on both sides
    steps_only_ours: int = 0
    steps_only_vllm: int = 0
    same_accept: int = 0
    step_diffs: list = field(default_factory=list)
    rates: dict = field(default_factory=dict)         # side -> {p1, p2_uncond, ...} over shared steps
    paired_by: str = "position"     # or "drafted step order": an engine run without positions (vLLM's n-gram)

    def to_dict(self) -> dict:
        return asdict(self)

    def lines(self) -> list[str]:
        out = [f"requests {self.requests}, K={self.K}, G={self.G}",
               f"completions: vLLM == transformers greedy {self.same_vs_transformers} / {self.requests}; "
               f"vLLM == our run {self.same_vs_ours} / {self.requests}; our run == transformers "
               f"{self.ours_vs_transformers} / {self.requests}"]
        out += [f"  differs: doc {d['doc_id']} turn {d['turn']} at token {d['at']}, transformers' top-1 - top-2 "
                f"logit there {d['margin']:.3g}" for d in self.divergences]
        out.append(f"steps at the same (doc, turn, {self.paired_by}): {self.steps_both} "
                   f"(only ours {self.steps_only_ours}, "
                   f"only vLLM {self.steps_only_vllm}); same accept_len {self.same_accept} / {self.steps_both}")
        for side, r in self.rates.items():
            out.append(f"  {side:5s} " + "  ".join(f"{k} {v:.4f}" for k, v in r.items()))
        for d in self.step_diffs:
            m = "n/a (run without shadow_topk)" if d.draft_margin is None else f"{d.draft_margin:.3g}"
            out.append(f"  step differs: doc {d.doc_id} turn {d.turn} position {d.position}: accept_len ours "
                       f"{d.ours}, vLLM {d.vllm}; draft {d.depth}'s top-1 - top-2 probability (ours) {m}")
        return out


def _steps(run: Path, m: dict, columns: list[str]):
    import pyarrow.parquet as pq
    have = set(pq.read_schema(str(run / m["shards"][0]["steps"])).names)
    return pq.read_table([str(run / s["steps"]) for s in m["shards"]],
                         columns=[c for c in columns if c in have]).to_pandas()


def engine_side(run: Path) -> tuple[dict, dict]:
    """(doc, turn) -> vLLM's reply ids, and -> its prompt ids, from the collector's raw answers."""
    replies, prompts = {}, {}
    for line in (run / "raw" / "responses.jsonl").read_text().splitlines():
        r = json.loads(line)
        ch = ((r.get("response") or {}).get("choices") or [{}])[0]
        if not isinstance(ch.get("token_ids"), list) or not isinstance(ch.get("prompt_token_ids"), list):
            raise AtlasError(f"{run}: collected without --token-ids (no reply or prompt ids): "
                             "the completions cannot be compared")
        replies[(r["doc_id"], r["turn"])] = ch["token_ids"]
        prompts[(r["doc_id"], r["turn"])] = ch["prompt_token_ids"]
    return replies, prompts


def _margin(row, depth: int) -> float | None:
    """Our drafter's top-1 minus top-2 probability at draft `depth` (1-based), if kept."""
    tp = row.get("topk_probs")
    if tp is None or len(tp) < depth or tp[depth - 1] is None or len(tp[depth - 1]) < 2:
        return None
    return float(tp[depth - 1][0] - tp[depth - 1][1])


def compare(ours: Path, engine: Path, hf_dir: Path | None = None) -> Comparison:
    mo, me = ref.manifest(ours), ref.manifest(engine)
    if mo["workload"]["hash"] != me["workload"]["hash"]:
        raise AtlasError(f"different workloads: {ours} has {mo['workload']['hash']}, {engine} "
                         f"{me['workload']['hash']}")
    K, G = int(mo["levers"]["num_drafts"]), int(mo["config"]["workload"]["gen_tokens"])
    replies, prompts = engine_side(engine)
    st = _steps(ours, mo, ["doc_id", "turn", "step", "position", "k", "accept_len", "committed", "topk_probs"])
    st = st.sort_values(["doc_id", "turn", "step"])
    greedy, _ = ref.ours(mo)
    committed = {(int(d), int(t)): greedy[(int(d), int(t))][:1] + [int(x) for c in g["committed"] for x in c]
                 for (d, t), g in st.groupby(["doc_id", "turn"])}
    if set(committed) != set(replies):
        raise AtlasError(f"the runs hold different requests: {len(committed)} ours, {len(replies)} vLLM's")
    hf, hf_margin = ref.transformers_greedy(hf_dir or mo["model"]["path"], prompts,
                                            {k: len(v) for k, v in replies.items()})
    c = Comparison(K, G, len(replies), 0, 0, 0)
    for key in sorted(replies):
        at = ref.first_difference(replies[key], hf[key])
        c.same_vs_transformers += at is None
        c.same_vs_ours += replies[key] == committed[key]
        c.ours_vs_transformers += committed[key] == hf[key]
        if at is not None:
            c.divergences.append({"doc_id": key[0], "turn": key[1], "at": at,
                                  "margin": hf_margin[key][at] if at < len(hf_margin[key]) else float("nan")})
    ve = _steps(engine, me, ["doc_id", "turn", "step", "position", "accept_len"])
    left, keys = st, ["doc_id", "turn", "position"]
    if "position" not in ve:   # vLLM records drafted steps only, unplaced (n-gram): a request's i-th drafted step
        req = ["doc_id", "turn"]
        left = st[st["k"] >= 1].sort_values(req + ["step"])
        left = left.assign(nth=left.groupby(req).cumcount())
        ve = ve.sort_values(req + ["step"])
        ve = ve.assign(nth=ve.groupby(req).cumcount())
        keys, c.paired_by = req + ["nth"], "drafted step order"
    both = left.merge(ve, on=keys, how="outer", suffixes=("_o", "_v"), indicator=True)
    c.steps_only_ours = int((both["_merge"] == "left_only").sum())
    c.steps_only_vllm = int((both["_merge"] == "right_only").sum())
    b = both[both["_merge"] == "both"]
    c.steps_both, c.same_accept = len(b), int((b["accept_len_o"] == b["accept_len_v"]).sum())
    for side in ("o", "v"):
        a = b[f"accept_len_{side}"]
        c.rates["ours" if side == "o" else "vLLM"] = {
            "p1": float((a >= 1).mean()), **({"p2_uncond": float((a >= 2).mean())} if K >= 2 else {}),
            "tokens_per_step": float(1 + a.mean())}
    for _, r in b[b["accept_len_o"] != b["accept_len_v"]].iterrows():
        depth = int(min(r["accept_len_o"], r["accept_len_v"])) + 1
        c.step_diffs.append(StepDiff(int(r["doc_id"]), int(r["turn"]), int(r["position"]), int(r["accept_len_o"]),
                                     int(r["accept_len_v"]), depth, _margin(r, depth)))
    return c


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0])
    ap.add_argument("ours", type=Path)
    ap.add_argument("engine", type=Path)
    ap.add_argument("--hf", type=Path, help="checkpoint transformers decodes (default: our run's model)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        c = compare(a.ours, a.engine, a.hf)
    except AtlasError as e:
        print(f"{PROG}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(json.dumps(c.to_dict(), indent=1) if a.json else "\n".join(c.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
