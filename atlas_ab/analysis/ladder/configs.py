"""A fitted ladder written as the configs engines read.

Ranges: the K chosen at a measured width w_i serves batch sizes w_i .. w_{i+1} - 1 (the first range starts
at 1, the last runs to `max_batch`, by default the widest width measured); neighbouring ranges with one K
are merged. What each engine does past the last range is its own (below). The formats, as read in each
engine's source:

  vLLM       `speculative_config.num_speculative_tokens_per_batch_size` (PR #32374): a list of
             [bs_lo, bs_hi, K] entries, inclusive, sorted, non-overlapping, the first starting at 1, K >= 0;
             a gap inherits the previous K, batch sizes past the last entry keep the last K, and every K is
             clamped to `num_speculative_tokens` (> 0), the startup maximum
             (vllm/v1/spec_decode/dynamic/utils.py, validate_and_normalize_dynamic_sd_schedule and
             build_dynamic_sd_schedule_lookup).
  TensorRT   `speculative_config.draft_len_schedule`: {batch size: draft_len}, each key the inclusive
  -LLM       upper bound of its range (sizes up to the smallest key use its draft_len, ...); past the
             largest key speculation is off; the smallest key's draft_len must equal `max_draft_len` and no
             draft_len may exceed it (tensorrt_llm/llmapi/llm_args.py, DecodingBaseConfig.draft_len_schedule
             and validate_draft_len_schedule_and_sort). A ladder whose K rises after its first range cannot
             be written so, and is not (the note says why).
  reference  K by batch width is the engine's own ladder (`speculative::ladder`, `mtp_ladder_drafts`); no
  engine     variable sets it. The file gives, per range, the arm's ATLAS_MTP_* lines (config/levers.py)
             with K as ATLAS_MTP_NUM_DRAFTS (ours, docs/reference_engine.md); K = 0 (no K pays) is MTP
             off, which no ATLAS_MTP_* value says, so it is a comment.
  JSON       every cell and every choice with its intervals (LadderResult.to_dict) and the ranges.

A ladder with a cell timed in one job only is not a verdict (ladder.SINGLE): its engine configs (vLLM,
TensorRT-LLM, the reference engine's) are not written unless `allow_single` (the CLI's
--allow-single-replicate), and then each says so in its header (JSON: the `atlas_ab_note` key beside
`speculative_config`). ladder.json is written either way, marked.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from atlas_ab.analysis.ladder.fitting import LadderResult
from atlas_ab.analysis.stats.replicates import SINGLE
from atlas_ab.atomic import write_json

FILES = {"vllm": "vllm_speculative_config.json", "trtllm": "trtllm_extra_llm_api_options.yaml",
         "atlas": "atlas_mtp_ladder.env", "json": "ladder.json"}
#: the flag that writes engine configs from a single-replicate ladder, and the header they then carry
ALLOW_SINGLE = "--allow-single-replicate"
SINGLE_HEADER = f"{SINGLE}: written from one timed job per cell because {ALLOW_SINGLE} was passed"


def ranges(ladder: dict[int, int], max_batch: int | None = None) -> list[tuple[int, int, int]]:
    """[(lo, hi, K)] over batch sizes 1 .. max_batch, merged where K repeats."""
    ws = sorted(ladder)
    top = max(ws) if max_batch is None else max(max_batch, max(ws))
    out: list[list[int]] = []
    for i, w in enumerate(ws):
        lo = 1 if i == 0 else w
        hi = ws[i + 1] - 1 if i + 1 < len(ws) else top
        if out and out[-1][2] == ladder[w]:
            out[-1][1] = hi
        else:
            out.append([lo, hi, ladder[w]])
    return [tuple(r) for r in out]


def vllm_config(rs: list[tuple[int, int, int]]) -> dict | None:
    """The speculative_config keys vLLM reads; None when no K pays anywhere (serve without speculation)."""
    k_max = max(k for *_, k in rs)
    if k_max == 0:
        return None
    return {"method": "mtp", "num_speculative_tokens": k_max,
            "num_speculative_tokens_per_batch_size": [[lo, hi, k] for lo, hi, k in rs]}


def trtllm_config(rs: list[tuple[int, int, int]]) -> tuple[dict | None, str | None]:
    """({max_draft_len, draft_len_schedule}, None) or (None, why it cannot be written)."""
    first = rs[0][2]
    if first == 0:
        return None, ("no K pays at batch size 1: TensorRT-LLM's schedule must give its smallest batch size "
                      "max_draft_len > 0" + ("" if max(k for *_, k in rs) else "; no K pays anywhere: serve "
                                              "without speculation"))
    if any(k > first for *_, k in rs):
        return None, (f"the ladder's K rises after batch size {rs[0][1]} (K={first}), and TensorRT-LLM requires the "
                      "smallest batch size's draft_len to be the largest (max_draft_len)")
    # a range with K = 0 past the last positive one is what the schedule does past its largest key
    last = max(i for i, (*_, k) in enumerate(rs) if k > 0)
    return {"max_draft_len": first, "draft_len_schedule": {hi: k for lo, hi, k in rs[:last + 1]}}, None


def _yaml(d: dict, indent: int = 0) -> list[str]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out.append(" " * indent + f"{k}:")
            out += _yaml(v, indent + 2)
        else:
            out.append(" " * indent + f"{k}: {v}")
    return out


def atlas_lines(rs: list[tuple[int, int, int]], levers: dict) -> list[str]:
    """Per range, the ATLAS_MTP_* lines of the runs' arm with its K (config/levers.py)."""
    from atlas_ab.config.levers import arm_to_env
    from atlas_ab.config.structured import ArmConfig

    keep = {k: v for k, v in levers.items() if k in ArmConfig.__dataclass_fields__ and k not in ("num_drafts", "name")}
    lines = ["# atlas_ab K ladder for the reference engine: K by batch width is its own ladder (speculative::ladder,",
             "# mtp_ladder_drafts), which no variable sets; ATLAS_MTP_NUM_DRAFTS is atlas_ab's name for K.",
             "# One block per range of batch widths; source the block of the width you serve at."]
    for lo, hi, k in rs:
        lines.append(f"# batch width {lo}-{hi}: K={k}")
        if k == 0:
            lines.append("# no K pays here: serve without MTP (no ATLAS_MTP_* value turns the proposer off)")
            continue
        arm = ArmConfig(**{**keep, "num_drafts": k, "name": f"k{k}"})
        lines += [f"{name}={value}" for name, value in arm_to_env(arm).items()]
    return lines


def finite(x):
    """JSON-safe: NaN and infinities (a statistic not computed) as null."""
    if isinstance(x, dict):
        return {str(k): finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        x = x.item()
    return None if isinstance(x, float) and not math.isfinite(x) else x


def write_configs(result: LadderResult, out: Path, levers: dict | None = None, max_batch: int | None = None,
                  provenance: dict | None = None, allow_single: bool = False) -> dict[str, Path]:
    """Write the four files under `out`; returns name -> path (vLLM / TensorRT-LLM only where writable;
    the engines' none from a single-replicate ladder unless allow_single, module docstring)."""
    out.mkdir(parents=True, exist_ok=True)
    rs = ranges(result.ladder, max_batch)
    notes = list(result.notes)
    written = {}
    single = result.single_replicate
    if single and not allow_single:
        notes.append(f"engine configs not written: {SINGLE} (a cell timed in one job); time each cell in several "
                     f"replicates (+study=ladder study.replicates=3), or pass {ALLOW_SINGLE} to write them anyway")
    else:
        written.update(_engine_files(rs, out, levers, notes, SINGLE_HEADER if single else None))
    p = out / FILES["json"]
    write_json(p, finite({**result.to_dict(), "ranges": [list(r) for r in rs], "notes": notes,
                           "provenance": provenance or {}}))
    written["json"] = p
    result.notes[:] = notes
    return written


SINGLE_NOTE = ".NOTE"        # vllm_speculative_config.json.NOTE: the header JSON cannot carry


def _engine_files(rs, out: Path, levers: dict | None, notes: list[str], header: str | None) -> dict[str, Path]:
    """The vLLM, TensorRT-LLM and reference-engine files; `header` (a single-replicate ladder's) heads each."""
    written = {}
    head = [] if header is None else [f"# {header}"]
    v = vllm_config(rs)
    if v is None:
        notes.append("vLLM: no K pays anywhere: serve without speculative_config (no file written)")
    else:
        p = out / FILES["vllm"]
        # the bare object: vLLM's SpeculativeConfig forbids extra fields (vllm/config/speculative.py, @config;
        # vllm/config/utils.py), so `--speculative-config "$(cat FILE)"` takes nothing around it, and a
        # single-replicate ladder's header goes beside it (the file named SINGLE_NOTE) and into ladder.json
        p.write_text(json.dumps(v, indent=2) + "\n")
        written["vllm"] = p
        if header is not None:
            (out / (FILES["vllm"] + SINGLE_NOTE)).write_text(header + "\n")
    t, why = trtllm_config(rs)
    if t is None:
        notes.append(f"TensorRT-LLM: not written: {why}")
    else:
        p = out / FILES["trtllm"]
        p.write_text("\n".join(head + ["# --extra_llm_api_options: add the speculative_config's decoding_type (MTP) "
                                       "and", "# its model fields; the schedule and its maximum are the ladder's."]
                               + _yaml({"speculative_config": t})) + "\n")
        written["trtllm"] = p
    p = out / FILES["atlas"]
    p.write_text("\n".join(head + atlas_lines(rs, levers or {})) + "\n")
    written["atlas"] = p
    return written
