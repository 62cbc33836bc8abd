"""The engine files of the gate's tests and of docs/ci_gate.md's worked example
(tests/fixtures/gate/*.jsonl, written by `python -m tests.helpers.gate_files tests/fixtures/gate`).

One workload of 240 single-turn requests, answered by a baseline and three candidates, each as vLLM
(per-request metrics.speculative_decoding with per-step arrays) and as SGLang (meta_info with
its histogram). The text is the prompt's (greedy, the same in every arm) unless `sampled`; the
acceptance is engine_fixtures.chain_steps' synthetic chain, drawn afresh per arm:
  baseline          p_cond (0.70, 0.75, 0.80)
  candidate_same    the same p_cond, its own draws (run-to-run noise only)
  candidate_worse   p_cond (0.62, 0.75, 0.80): p1 down by ~0.08
  candidate_sampled the same p_cond, but every completion's text differs (a sampling server)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.helpers.engine_fixtures import (
    chain_steps,
    prompt_tokens,
    reply_for,
    sglang_meta,
    sglang_response,
    vllm_response,
    vllm_spec,
)

K, N_REQUESTS, COMPLETION = 3, 240, 40
ARMS = {"baseline": ((0.70, 0.75, 0.80), "b", False), "candidate_same": ((0.70, 0.75, 0.80), "s", False),
        "candidate_worse": ((0.62, 0.75, 0.80), "w", False), "candidate_sampled": ((0.70, 0.75, 0.80), "t", True)}


def records(engine: str, arm: str) -> list[dict]:
    p_cond, tag, sampled = ARMS[arm]
    out = []
    for doc in range(N_REQUESTS):
        prompt = f"document {doc}: summarise the function below"
        text = reply_for(prompt + (f" sampled {tag}" if sampled else ""), 6)
        ks, accs = chain_steps(f"{tag}:{prompt}", COMPLETION, K, p_cond)
        P = prompt_tokens(prompt)
        if engine == "vllm":
            body = vllm_response(text, P, COMPLETION, vllm_spec(ks, accs, K))
        else:
            body = sglang_response(text, sglang_meta(ks, accs, K, P, COMPLETION))
        out.append({"doc_id": doc, "turn": 0, "response": body})
    return out


def write(directory) -> list[Path]:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for engine in ("vllm", "sglang"):
        for arm in ARMS:
            p = d / f"{engine}_{arm}.jsonl"
            p.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records(engine, arm)))
            paths.append(p)
    return paths


if __name__ == "__main__":
    for p in write(sys.argv[1]):
        print(p)
