"""An arm as the engines' speculative-decoding configuration: one function per engine (issue 49), and
vLLM's defaults for the weightless families' levers an arm leaves unset (the proposers draft with them).

`python -m atlas_ab.engines.spec_config +arm=NAME [overrides]` prints each engine's, so an arm
of ours is a server a user can start; with `--vllm` first, vLLM's JSON only, as our vLLM launcher
takes it: `python -m atlas_ab.engines.vllm serve --speculative-config "$(python -m
atlas_ab.engines.spec_config --vllm +arm=ngram)"`. Where an engine has no such family, or only a different
algorithm under the same name, the function says so instead of writing a config that looks the same.

  vLLM 0.32     `--speculative-config` JSON: `method` and its keys (vllm/config/speculative.py:
                prompt_lookup_min / prompt_lookup_max for ngram, the suffix_decoding_* keys for
                suffix; `model` for draft_model and eagle3), exactly ours
  SGLang        `--speculative-algorithm NGRAM` (docs: advanced_features/speculative_decoding.md,
                "Ngram Speculative Decoding"): an n-gram CACHE of earlier tokens searched breadth
                first, not vLLM's prompt lookup: the window sizes and K carry over, the rule does not
  TensorRT-LLM  `speculative_config: {decoding_type: NGram, ...}` (tensorrt_llm/llmapi/llm_args.py,
                NGramDecodingConfig): a pool of pattern -> match pairs; max_matching_ngram_size is
                the longest pattern, is_use_oldest the earliest match (vLLM's), is_public_pool false
                (each request's own context, as vLLM); it has no shortest n-gram
Suffix decoding is vLLM's only.
"""
from __future__ import annotations

from atlas_ab.config.structured import ArmConfig

#: vLLM's prompt_lookup_min / prompt_lookup_max when neither is set
DEFAULT_LOOKUP = 5
#: vLLM 0.32's suffix decoding defaults (vllm/config/speculative.py)
SUFFIX_DEFAULTS = {"suffix_decoding_max_tree_depth": 24, "suffix_decoding_max_spec_factor": 1.0,
                   "suffix_decoding_min_token_prob": 0.1, "suffix_decoding_max_cached_requests": 10000}


def lookup_bounds(lo, hi) -> tuple[int, int]:
    """(prompt_lookup_min, prompt_lookup_max) as vLLM resolves them from the two (None = unset)."""
    if lo is None and hi is None:
        return DEFAULT_LOOKUP, DEFAULT_LOOKUP
    return (hi if lo is None else lo), (lo if hi is None else hi)


def suffix_levers(arm) -> dict:
    """The arm's suffix levers with vLLM's defaults where unset."""
    return {k: d if getattr(arm, k) is None else getattr(arm, k) for k, d in SUFFIX_DEFAULTS.items()}


#: where the drafter's own weights are, for the families that have them (vLLM's `model` key); EAGLE-3's
#: shipped head is written in the layout vLLM's eagle3 method loads (runtime/eagle3_checkpoint.py)
WEIGHTS = {"draft_model": "DRAFT_MODEL_PATH", "eagle3": "EAGLE3_HEAD_PATH (e.g. atlas_ab/models/eagle3)"}


def vllm(arm: ArmConfig, draft_model: str | None = None) -> dict:
    """vLLM's --speculative-config object for the arm (draft_model: the draft model's or EAGLE-3 head's path)."""
    cfg = {"method": arm.proposer, "num_speculative_tokens": arm.num_drafts}
    if arm.proposer == "ngram":
        cfg["prompt_lookup_min"], cfg["prompt_lookup_max"] = lookup_bounds(arm.prompt_lookup_min,
                                                                           arm.prompt_lookup_max)
    elif arm.proposer == "suffix":
        cfg.update(suffix_levers(arm))
    elif arm.proposer in WEIGHTS:
        cfg["model"] = draft_model or WEIGHTS[arm.proposer]
    return cfg


def sglang(arm: ArmConfig) -> tuple[list[str] | None, str]:
    """(SGLang's server flags or None, a note on what they are)."""
    if arm.proposer == "suffix":
        return None, "SGLang has no suffix decoding"
    if arm.proposer == "ngram":
        lo, hi = lookup_bounds(arm.prompt_lookup_min, arm.prompt_lookup_max)
        flags = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(arm.num_drafts),
                 "--speculative-ngram-min-match-window-size", str(lo),
                 "--speculative-ngram-max-match-window-size", str(hi),
                 "--speculative-ngram-min-bfs-breadth", "1", "--speculative-ngram-max-bfs-breadth", "1"]
        return flags, "SGLang's NGRAM is an n-gram cache searched breadth first (breadth 1: a chain), not prompt lookup"
    return None, f"not written for proposer={arm.proposer} (issue 49 writes the weightless families)"


def trtllm(arm: ArmConfig) -> tuple[dict | None, str]:
    """(TensorRT-LLM's speculative_config or None, a note on what it is)."""
    if arm.proposer == "ngram":
        _, hi = lookup_bounds(arm.prompt_lookup_min, arm.prompt_lookup_max)
        return ({"decoding_type": "NGram", "max_draft_len": arm.num_drafts, "max_matching_ngram_size": hi,
                 "is_keep_all": True, "is_use_oldest": True, "is_public_pool": False},
                "TensorRT-LLM's NGram pool: no shortest n-gram (prompt_lookup_min has no key)")
    if arm.proposer == "suffix":
        return None, "TensorRT-LLM has no suffix decoding"
    return None, (f"not written for proposer={arm.proposer} (analysis/ladder/configs.py writes TensorRT-LLM's "
                  "MTP schedule)")
