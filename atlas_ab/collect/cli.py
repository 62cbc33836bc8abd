"""`python -m atlas_ab.collect`: atlas_ab as the A/B client of a running engine.

Sends a workload to any OpenAI-compatible server with greedy settings (temperature 0,
n = 1, a fixed seed; a server that answers one probe prompt differently twice is refused),
records each response's spec-decode telemetry with its doc_id and turn (engines
do not know them), and writes a run directory in the contract at the finest grain the
engine gives (atlas_ab/ingest). Restart the engine with the lever flipped, collect again
under the other arm name, then `python -m atlas_ab.analysis report RUN_A RUN_B --prereg ...`.

  workload   ours (atlas_ab/workload/documents.py: documents x turns of corpus text, decoded with the
             embedded tokenizer) or the user's prompts (--prompts FILE.jsonl: {"turns": [...]}
             or {"prompt": "..."} per line, optional "doc_id", "max_tokens")
  turns      turn t's request is the conversation so far (earlier chunks and the server's
             own replies) plus chunk t
  robustness bounded concurrency (documents in parallel, turns in order), retries with
             backoff on connection errors / 429 / 5xx, a progress bar, resume (--resume):
             every answer is appended (and fsync'd) to raw/responses.jsonl as it arrives
  manifest   endpoint, reported model, engine and version where the server says, prompts
             hash, arm, the telemetry's grain; status running -> complete, written last

Standard library HTTP only (urllib + concurrent.futures).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from atlas_ab import AtlasError
from atlas_ab.collect.client import ENGINES, PROG, RETRIES, TIMEOUT_S
from atlas_ab.collect.collector import collect
from atlas_ab.errors import one_line_parser


def _number(kind, low: float, inclusive: bool, what: str):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(v) or v < low or (v == low and not inclusive):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return v
    return parse


POSITIVE_INT = _number(int, 1, True, "an integer >= 1")
COUNT = _number(int, 0, True, "an integer >= 0")
SECONDS = _number(float, 0.0, False, "a number of seconds > 0")


def build_parser() -> argparse.ArgumentParser:
    p = one_line_parser(PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="the server's OpenAI base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--arm", required=True, help="the arm's name (the lever setting the server runs)")
    p.add_argument("--out", help="run directory (default runs/collect/<arm>)")
    p.add_argument("--engine", default="auto", choices=("auto",) + ENGINES,
                   help="the server's engine (auto: from /v1/models owned_by)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--workload", default="default", help="our workload: conf/workload/NAME.yaml (default, tiny)")
    src.add_argument("--prompts", help="the user's prompts, JSON lines ({'turns': [...]} or {'prompt': ...})")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="workload override (n_docs=4, ...)")
    p.add_argument("--max-tokens", type=POSITIVE_INT, default=256, help="per turn, for --prompts without max_tokens")
    p.add_argument("--model", help="model name to send (default: the server's first /v1/models entry)")
    p.add_argument("--api", default="chat", choices=("chat", "completions"), help="endpoint to use")
    p.add_argument("--stream", action="store_true", help="stream answers (telemetry rides the final usage chunk; "
                                                         "not with sglang)")
    p.add_argument("--ignore-eos", action="store_true", help="send ignore_eos: true (exactly max_tokens per turn)")
    p.add_argument("--token-ids", action="store_true",
                   help="llama.cpp: send our workload's token ids to /completion and continue each turn with the "
                        "reply's ids (both sides see the same tokens; no text round trip)")
    p.add_argument("--concurrency", type=POSITIVE_INT, default=8,
                   help="requests in flight: one per document, its turns in order; each answer records how many "
                        "were in flight when it was sent (in_flight), the load level an engine's K ladder reads")
    p.add_argument("--retries", type=COUNT, default=RETRIES,
                   help=f"retries per request on connection errors, 429, 5xx (default {RETRIES}; a timeout is "
                        "not retried)")
    p.add_argument("--timeout", type=SECONDS, default=TIMEOUT_S,
                   help=f"seconds a request may wait for its answer (default {TIMEOUT_S:g})")
    p.add_argument("--resume", action="store_true", help="continue an interrupted collection in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar, no waiting lines")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    args.out = args.out or str(Path("runs/collect") / args.arm)
    try:
        return collect(args)
    except AtlasError as e:
        print(f"{PROG}: error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
