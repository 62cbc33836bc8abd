"""Structured configs: arm (the levers), model, workload, runner, study, and their checks.

These dataclasses are the schema Hydra validates against (`hydra_schema.py` registers them):
a wrong type is rejected by OmegaConf, an unknown key (also one added with `+`) by
`hydra_schema.check_keys`, an out-of-range value or an impossible combination by the
`validate_*` functions below, all before any model loads. Each lever's meaning lives in
`levers.py`.

A config tells the truth: fields that would have no effect are unset (None), not defaulted.
The model's architecture fields exist for random initialisation only; a checkpoint's own
config.json decides its architecture, and the manifest records what was actually loaded.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import List, Optional

from atlas_ab import AtlasError
from atlas_ab.telemetry.schema import ROW_SPACES

#: The drafter families (`arm.proposer`); each has a builder in proposers/registry.py.
PROPOSERS = ("mtp", "draft_model", "eagle3", "ngram", "suffix")

#: live: the target verifies every step; replay: a stored target trajectory stands in for it.
RUN_MODES = ("live", "replay")


@dataclass
class ArmConfig:
    name: str = "baseline"
    proposer: str = "mtp"            # the drafter family: one of PROPOSERS
    num_drafts: int = 2              # K
    row_space: str = "compact"       # compact (Qwen MtpHead) | dense (GLM-5.3 head)
    drafter_prefill: bool = False    # DRAFTER_PREFILL: prefill the drafter on every turn
    catchup: bool = False            # CATCHUP
    refeed: bool = False             # REFEED (requires catchup)
    refeed_shift: int = 0            # SHIFT, in [-4, 4]
    ring_prefill: bool = False       # RING_PREFILL: ring the turn prefill's last hidden (requires catchup)
    draft_conf: float = 0.0          # DRAFT_CONF tau, in [0, 0.99]
    shadow_topk: int = 0             # SHADOW_TOPK, in [0, 8]
    oracle_p2: bool = False          # ORACLE_P2 (observational)
    fingerprints: Optional[bool] = None  # FINGERPRINTS; None = on iff the arm has a ring
    # Under a sampled workload (workload.sampling.temperature > 0); unset under greedy verification.
    # sampled (x ~ q, verified by min(1, p/q)) | greedy (argmax q, one-hot q); None = sampled (a tree arm: greedy)
    draft_policy: Optional[str] = None
    draft_temperature: Optional[float] = None  # the drafter's q temperature; None = the target's
    ring_size: int = 64              # per-sequence catch-up ring capacity (labels)
    handoff_norm: str = "checkpoint"  # HANDOFF_NORM: checkpoint (as declared) | pre | post the trunk's final norm
    recycle_norm: str = "checkpoint"  # RECYCLE_NORM: checkpoint | pre | post the MTP layer's own final norm
    tree: Optional[str] = None       # TREE: a static draft tree (config/tree.py); None = the K-chain
    # issue 50, the drafter's head and KV numerics (drafting only: committed tokens never move)
    head_fp8: bool = False           # HEAD_FP8: draft with an FP8 E4M3 copy of lm_head (the engine's default is on)
    kv_fp8: bool = False             # KV_FP8: the drafter's own KV rows stored as FP8 E4M3
    head_shards: int = 1             # HEAD_SHARDS: the head's top-1 over 1, 2, 4 or 8 vocabulary slices, reduced
    # issue 50 (rows): the drafter's context rows, its cost split, its rows across turns
    prefill_full: bool = False       # PREFILL_FULL: context rows through the whole block, not the KV-only shortcut
    # PREFIX_REUSE: each warm turn a new request over a prefix cache (a fresh drafter, its capture a no-op);
    # off: a document's turns are one request (its drafter never rebuilt), as this runner always ran them
    prefix_reuse: bool = False
    carry_drafter: bool = False      # CARRY_DRAFTER: under prefix_reuse, the last turn's drafter rows installed
    drafter_skip: str = "none"       # DRAFTER_SKIP (timing arms): none | head (drafts token 0) | block (no block)
    # issue 49, the weightless families (vLLM's speculative-config keys, same names); None = vLLM's default
    prompt_lookup_min: Optional[int] = None     # ngram: shortest n-gram matched; None = vLLM's rule (5, or max)
    prompt_lookup_max: Optional[int] = None     # ngram: longest n-gram matched; None = vLLM's rule (5, or min)
    suffix_decoding_max_tree_depth: Optional[int] = None        # suffix: the trees' depth; None = 24
    suffix_decoding_max_spec_factor: Optional[float] = None     # suffix: drafts <= factor x match length; None = 1.0
    suffix_decoding_min_token_prob: Optional[float] = None      # suffix: a draft's least estimated prob; None = 0.1
    suffix_decoding_max_cached_requests: Optional[int] = None   # suffix: responses in the global tree; None = 10000

    @property
    def has_ring(self) -> bool:
        return self.catchup or self.refeed

    @property
    def fingerprints_on(self) -> bool:
        return self.has_ring if self.fingerprints is None else bool(self.fingerprints)


#: The architecture fields of ModelConfig: for init=random only.
ARCH_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "intermediate_size", "vocab_size")


@dataclass
class ModelConfig:
    name: str = "default"
    path: Optional[str] = "atlas_ab/models/default"   # HF checkpoint dir (init=checkpoint)
    draft_path: Optional[str] = None        # the draft-model proposer's checkpoint dir
    eagle3_path: Optional[str] = None       # the EAGLE-3 proposer's head dir (vLLM's eagle3 layout; issue 49)
    init: str = "checkpoint"                # checkpoint | random (shapes for speed work)
    # Architecture, for init=random only (unset otherwise: a checkpoint's config.json decides).
    hidden_size: Optional[int] = None
    num_hidden_layers: Optional[int] = None
    num_attention_heads: Optional[int] = None
    num_key_value_heads: Optional[int] = None
    intermediate_size: Optional[int] = None
    vocab_size: Optional[int] = None


@dataclass
class SamplingConfig:
    """The target's sampling rule (speculative/distribution.py). temperature 0 is greedy verification,
    the default, which never builds a distribution; the other fields then have no effect."""
    temperature: float = 0.0    # 0 = greedy
    top_p: float = 1.0          # nucleus mass kept, in (0, 1]; 1 = all
    top_k: int = 0              # largest logits kept; 0 = all
    seed: int = 0               # of every uniform a sampled run draws (speculative/uniforms.py)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


#: `workload.corpus` and `workload.split`'s values (workload/corpus.py builds the text of each)
CORPUS_SOURCES = ("stdlib", "pydoc")
SPLITS = ("train", "heldout")


@dataclass
class WorkloadConfig:
    corpus: str = "stdlib"      # stdlib (Python source) | pydoc (language reference prose)
    split: str = "heldout"      # heldout | train
    n_docs: int = 16
    turns: int = 8
    chunk_tokens: int = 64      # tokens appended to the context at each turn
    gen_tokens: int = 32        # tokens generated per turn (exactly)
    seed: int = 0
    sampling: SamplingConfig = field(default_factory=SamplingConfig)


@dataclass
class EngineTarget:
    """`runner.engine`: the class Hydra instantiates (`_partial_`: the session passes the four configs)."""
    _target_: str = "atlas_ab.run.runner.Runner"
    _partial_: bool = True


@dataclass
class RunnerConfig:
    device: str = "auto"        # auto | cpu | cuda | cuda:N
    dtype: str = "auto"         # auto (fp32 on CPU, bf16 on GPU) | float32 | bfloat16
    batch_width: int = 16       # sequences verified together; also the shard unit
    # sequences per wave the lossless gate checks; 0 = gate off (recorded "not run"); null = per device
    # (GATE_SEQUENCES: 2 on the CPU, 8 on a GPU, where the check's forward is a small share of the steps)
    gate_sequences: Optional[int] = None
    seed: int = 0
    threads: int = 0            # torch CPU threads; 0 = the cores this job may use (see device.py)
    progress: bool = True       # progress bar on a TTY (never affects results; ignored by resume's check)
    resume: Optional[str] = None  # PATH of an interrupted run to continue, or "auto" (this job's own dir)
    # the engine class driven, built by Hydra's instantiate; tests plug a double in `_target_`
    engine: EngineTarget = field(default_factory=EngineTarget)
    cuda_graphs: bool = True    # replay the verify and draft steps from CUDA graphs (GPU only)
    # with graphs: the device plans and runs a turn's steps ahead of the host where the arm allows
    # (every arm but DRAFT_CONF's: speculative/run_ahead.py); the same rows, a chunk's mean step_ms
    run_ahead: bool = True
    # with graphs: the step's bookkeeping (plan, acceptance, packing, book) compiled by torch.compile
    # into a few kernels (runtime/fusion.py); the same rows, a shorter step. null: compiled when the run
    # is long enough to win the compile back (FUSE_MIN_STEPS), else eager
    fuse_bookkeeping: Optional[bool] = None
    # where inductor's and Triton's compiled kernels persist between processes (runtime/compile_cache.py):
    # auto ($XDG_CACHE_HOME/atlas_ab or ~/.cache/atlas_ab), a directory, or none (the libraries' defaults)
    compile_cache: str = "auto"
    # live: the target verifies every step. replay: every arm replays one stored target-only greedy
    # trajectory per workload (built once, under `trajectories`); no trunk forward, no step timings.
    mode: str = "live"
    trajectories: str = "runs/trajectories"   # replay's trajectory cache (relative to the launch dir)
    replay_check_waves: int = 1               # replay: the first N waves also run live, to measure disagreement
    # a wave's shard is encoded and written on a background thread while the next wave runs
    # (run/shard_writer.py); the same files and manifest, in the same order
    write_behind: bool = True


@dataclass
class StudyConfig:
    name: str = ""
    # Pre-registrations (analysis/prereg/NAME.yaml, or just NAME), locked when the study starts.
    preregs: List[str] = field(default_factory=list)
    arms: List[str] = field(default_factory=list)   # the arm names the study compares
    # kind ladder (conf/study/ladder.yaml): K in 0..k_max at each batch width of `widths`, every job
    # checking the whole grid before any model loads (run/ladder_grid.py)
    kind: str = "ab"
    widths: List[int] = field(default_factory=list)
    k_max: int = 0
    waves: int = 0     # > 0: each job runs this many waves (workload.n_docs = waves x its batch width)
    # a ladder's replicates: each (B, K) timed in this many jobs, run in a seeded interleaved order
    # (config/ladder_order.py); the sweep's parameter is `slot`, and `replicate` is the slot's (derived)
    replicates: int = 1
    order_seed: int = 0
    slot: int = 0
    replicate: int = 0
    block: Optional[int] = None   # r: this sweep runs replicate r alone (each replicate its own process)
    # a family ladder (conf/study/families_ladder.yaml): the grid's second coordinate is a family (an arm
    # name, or plain), its index in `families` (k_max = len - 1); each drafting family at family_k drafts
    families: List[str] = field(default_factory=list)
    family: str = ""
    family_k: int = 2


#: handoff_norm / recycle_norm: what the checkpoint declares, or forced before / after the norm
HANDOFF_CHOICES = ("checkpoint", "pre", "post")
#: draft_policy: drafts drawn from q, or q's argmax (speculative/sampling.py)
DRAFT_POLICIES = ("sampled", "greedy")
#: The largest sampling temperature accepted (past it the target is ~uniform: a typo, not a study).
MAX_TEMPERATURE = 10.0

RANGES = {
    "num_drafts": (1, 8),
    "refeed_shift": (-4, 4),
    "draft_conf": (0.0, 0.99),
    "shadow_topk": (0, 8),
    "ring_size": (8, 1 << 16),
}


def _number(where: str, key: str, v, lo=None, hi=None, integer: bool = True) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and math.isnan(v)) \
            or (integer and not isinstance(v, int)):
        raise AtlasError(f"{where}: {key}={v!r} is not {'an integer' if integer else 'a number'}")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise AtlasError(f"{where}: {key}={v} is out of range {rng}")


def validate_arm(arm: ArmConfig) -> ArmConfig:
    """Strict check of an arm (the Hydra path). One-line AtlasError on the first problem."""
    where = f"arm {arm.name!r}"
    plain = arm.num_drafts == 0 and not isinstance(arm.num_drafts, bool)
    for key, (lo, hi) in RANGES.items():
        if not (plain and key == "num_drafts"):
            _number(where, key, getattr(arm, key), lo, hi, integer=key != "draft_conf")
    if plain:
        validate_plain(arm)
    if arm.proposer not in PROPOSERS:
        raise AtlasError(f"{where}: proposer={arm.proposer!r} is not a drafter family; one of {', '.join(PROPOSERS)}")
    if arm.row_space not in ROW_SPACES:
        raise AtlasError(f"{where}: row_space={arm.row_space!r} must be one of {', '.join(ROW_SPACES)}")
    if arm.refeed and not arm.catchup:
        raise AtlasError(f"{where}: refeed=true requires catchup=true "
                         "(the re-feed's rows are rebuilt by the catch-up feed)")
    if arm.ring_prefill and not arm.catchup:
        raise AtlasError(f"{where}: ring_prefill=true requires catchup=true (the catch-up feed is what "
                         "rebuilds the prefill's row from the ring)")
    if arm.refeed_shift != 0 and not arm.refeed:
        raise AtlasError(f"{where}: refeed_shift={arm.refeed_shift} has no effect without refeed=true")
    if arm.proposer == "draft_model":
        mtp_only = [k for k in ("catchup", "refeed", "ring_prefill", "oracle_p2", "drafter_prefill")
                    if getattr(arm, k)]
        mtp_only += [k for k in ("handoff_norm", "recycle_norm") if getattr(arm, k) != "checkpoint"]
        if mtp_only:
            levers = ", ".join(mtp_only[:-1]) + " and " + mtp_only[-1] if len(mtp_only) > 1 else mtp_only[0]
            verb = "apply" if len(mtp_only) > 1 else "applies"
            raise AtlasError(f"{where}: {levers} {verb} to the MTP proposer only (proposer=draft_model has "
                             f"no MTP head); set {'them' if len(mtp_only) > 1 else 'it'} off or use proposer=mtp")
    validate_eagle3_arm(where, arm)
    for key in ("handoff_norm", "recycle_norm"):
        if getattr(arm, key) not in HANDOFF_CHOICES:
            raise AtlasError(f"{where}: {key}={getattr(arm, key)!r} must be one of {', '.join(HANDOFF_CHOICES)}")
    if arm.draft_policy is not None and arm.draft_policy not in DRAFT_POLICIES:
        raise AtlasError(f"{where}: draft_policy={arm.draft_policy!r} must be one of {', '.join(DRAFT_POLICIES)}")
    if arm.draft_temperature is not None:
        _number(where, "draft_temperature", arm.draft_temperature, integer=False)
        if not 0 < arm.draft_temperature <= MAX_TEMPERATURE:
            raise AtlasError(f"{where}: draft_temperature={arm.draft_temperature} is out of range (0, "
                             f"{MAX_TEMPERATURE}]")
        if arm.draft_policy == "greedy":
            raise AtlasError(f"{where}: draft_temperature has no effect with draft_policy=greedy (argmax drafts)")
    if arm.oracle_p2 and arm.num_drafts < 2:
        raise AtlasError(f"{where}: oracle_p2 needs num_drafts >= 2 (it re-computes draft 2)")
    if arm.tree is not None:
        _validate_tree(where, arm)
    _validate_head_numerics(where, arm)
    _validate_drafter_rows(where, arm)
    _validate_lookup_families(where, arm)
    return arm


#: drafter_skip: the engine's ATLAS_GLM_MTP_SKIP timing arms (what a skipped propose drafts: levers.py)
DRAFTER_SKIPS = ("none", "head", "block")


def timing_only(arm: ArmConfig) -> Optional[str]:
    """Why a run of this arm measures time only (its drafts are not the drafter's), or None."""
    if arm.drafter_skip == "head":
        return "drafter_skip=head: every draft is token 0 (the drafter's head skipped)"
    if arm.drafter_skip == "block":
        return "drafter_skip=block: every draft is the head's argmax over eh_proj's output (the block skipped)"
    return None


def _validate_drafter_rows(where: str, arm: ArmConfig) -> None:
    """Issue 50's levers of the MTP head's rows (PREFILL_FULL, PREFIX_REUSE, CARRY_DRAFTER): the MTP
    proposer's only, and the combinations a new request per turn cannot run."""
    on = [k for k in ("prefill_full", "prefix_reuse", "carry_drafter") if getattr(arm, k)]
    if on and (arm.proposer != "mtp" or arm.num_drafts == 0):
        what = "num_drafts=0 is plain decode (no drafter)" if arm.num_drafts == 0 else \
            f"proposer={arm.proposer!r} has no MTP head"
        raise AtlasError(f"{where}: {on[0]} applies to the MTP proposer's rows only: {what}")
    if arm.carry_drafter and not arm.prefix_reuse:
        raise AtlasError(f"{where}: carry_drafter=true needs prefix_reuse=true (without it a document's turns "
                         "are one request, whose drafter is never rebuilt: there is nothing to carry)")
    if arm.prefix_reuse and arm.tree is not None:
        raise AtlasError(f"{where}: prefix_reuse runs with tree off (a tree arm runs with every other lever off)")
    if arm.drafter_skip not in DRAFTER_SKIPS:
        raise AtlasError(f"{where}: drafter_skip={arm.drafter_skip!r} must be one of {', '.join(DRAFTER_SKIPS)}")
    if arm.drafter_skip != "none":      # a timing arm: the plain chain only
        busy = [k for k in ("draft_conf", "shadow_topk", "oracle_p2", "tree", "draft_policy") if getattr(arm, k)]
        if busy or arm.proposer != "mtp" or arm.num_drafts == 0:
            what = busy[0] if busy else f"proposer={arm.proposer}" if arm.proposer != "mtp" else "num_drafts=0"
            raise AtlasError(f"{where}: drafter_skip={arm.drafter_skip} (a timing arm of the MTP head's chain) "
                             f"runs with {what} off")
    if arm.prefix_reuse and not arm.carry_drafter and arm.catchup:
        raise AtlasError(f"{where}: catchup under prefix_reuse needs carry_drafter=true (the ring feeds the "
                         "drafter it was written for; a new request's fresh drafter has none)")


def _validate_drafter_rows_workload(arm: ArmConfig, workload: WorkloadConfig) -> None:
    """CARRY_DRAFTER and PREFIX_REUSE act from a workload's second turn on."""
    on = [k for k in ("carry_drafter", "prefix_reuse") if getattr(arm, k)]
    if on and workload.turns < 2:
        raise AtlasError(f"arm {arm.name!r}: {on[0]}=true acts at a turn's start from the second turn on: "
                         f"workload.turns={workload.turns} has no second turn")


#: issue 49: each weightless family's levers and their ranges (vLLM validates >= 1, >= 0, [0, 1]; the upper
#: bounds are ours, past any sensible study)
FAMILY_LEVERS = {
    "ngram": {"prompt_lookup_min": (1, 64), "prompt_lookup_max": (1, 64)},
    "suffix": {"suffix_decoding_max_tree_depth": (1, 1024), "suffix_decoding_max_spec_factor": (0.0, 64.0),
               "suffix_decoding_min_token_prob": (0.0, 1.0), "suffix_decoding_max_cached_requests": (0, 1 << 20)},
}
#: what a weightless family has nothing for: the MTP head's levers and those that read a drafter's probabilities
WEIGHTLESS_IDLE = ("catchup", "refeed", "ring_prefill", "oracle_p2", "drafter_prefill", "draft_conf", "shadow_topk",
                   "tree")


def _validate_lookup_families(where: str, arm: ArmConfig) -> None:
    """issue 49: a family's levers in range and only on their family; the ngram and suffix families
    refuse the levers they have nothing for."""
    for family, levers in FAMILY_LEVERS.items():
        for key, (lo, hi) in levers.items():
            v = getattr(arm, key)
            if v is None:
                continue
            if arm.proposer != family:
                raise AtlasError(f"{where}: {key} applies to proposer={family} only (this arm's is {arm.proposer})")
            _number(where, key, v, lo, hi, integer=isinstance(lo, int))
    if arm.proposer == "ngram" and None not in (arm.prompt_lookup_min, arm.prompt_lookup_max) \
            and arm.prompt_lookup_min > arm.prompt_lookup_max:
        raise AtlasError(f"{where}: prompt_lookup_min={arm.prompt_lookup_min} must be <= "
                         f"prompt_lookup_max={arm.prompt_lookup_max}")
    if arm.proposer in FAMILY_LEVERS:
        idle = [k for k in WEIGHTLESS_IDLE if getattr(arm, k) not in (None, False, 0, 0.0)]
        idle += [k for k in ("handoff_norm", "recycle_norm") if getattr(arm, k) != "checkpoint"]
        if idle:
            raise AtlasError(f"{where}: {idle[0]} has no effect with proposer={arm.proposer} (no weights, no "
                             "probabilities, no rows); set it off")


#: num_drafts=0 is plain decode (run/plain.py): the levers of the drafter then have no effect.
PLAIN_IDLE = ("drafter_prefill", "catchup", "refeed", "ring_prefill", "draft_conf", "shadow_topk", "oracle_p2",
              "fingerprints", "draft_policy", "draft_temperature", "tree")


def validate_plain(arm: ArmConfig) -> None:
    """K = 0 (plain decode: one target token per forward, no drafter) with every drafter lever off."""
    idle = [k for k in PLAIN_IDLE if getattr(arm, k) not in (None, False, 0, 0.0)]
    if arm.proposer != "mtp" or arm.row_space != "compact":
        idle.append("proposer" if arm.proposer != "mtp" else "row_space")
    if idle:
        raise AtlasError(f"arm {arm.name!r}: num_drafts=0 is plain decode (no drafter): {idle[0]} has no effect; "
                         "set it to its default")


#: the levers a tree arm runs with off (the MTP proposer, greedy or sampled live, every other lever off)
TREE_LEVERS_OFF = ("drafter_prefill", "catchup", "refeed", "ring_prefill", "oracle_p2")


def _validate_tree(where: str, arm: ArmConfig) -> None:
    from atlas_ab.config.tree import parse_tree  # (here: config/tree.py reads nothing of this module)
    tree = parse_tree(arm.tree)        # a bad tree: one line naming its path
    if arm.proposer != "mtp":
        raise AtlasError(f"{where}: tree applies to the MTP proposer only (proposer={arm.proposer!r})")
    on = [k for k in TREE_LEVERS_OFF if getattr(arm, k)] + [k for k in ("draft_conf", "shadow_topk") if getattr(arm, k)]
    if on:
        raise AtlasError(f"{where}: tree runs with {on[0]} off (a tree arm runs with every other lever off)")
    # its drafts are the drafter's top-k, never drawn: under sampling they verify as one-hot q (tree_sampling.py)
    if arm.draft_policy == "sampled":
        raise AtlasError(f"{where}: tree drafts the drafter's top-k, never sampled: draft_policy=sampled does not "
                         "apply; set draft_policy=greedy or leave it unset")
    if arm.draft_temperature is not None:
        raise AtlasError(f"{where}: draft_temperature has no effect with tree (top-k drafts, verified as one-hot q)")
    if arm.num_drafts != tree.max_depth:
        raise AtlasError(f"{where}: tree {tree.describe()} is {tree.max_depth} deep but num_drafts="
                         f"{arm.num_drafts}; set num_drafts={tree.max_depth} (a path is booked as a linear draft of K)")


#: head_shards: the vocabulary split into this many slices (the engine's tensor-parallel ranks)
HEAD_SHARDS = (1, 2, 4, 8)


def _validate_head_numerics(where: str, arm: ArmConfig) -> None:
    """HEAD_FP8, KV_FP8, HEAD_SHARDS (issue 50): levers of the MTP head's linear drafts."""
    _number(where, "head_shards", arm.head_shards, 1, 8)
    if arm.head_shards not in HEAD_SHARDS:
        raise AtlasError(f"{where}: head_shards={arm.head_shards} must be one of {', '.join(map(str, HEAD_SHARDS))}")
    on = [k for k in ("head_fp8", "kv_fp8") if getattr(arm, k)] + (["head_shards"] if arm.head_shards > 1 else [])
    if not on:
        return
    if arm.num_drafts == 0:
        raise AtlasError(f"arm {arm.name!r}: num_drafts=0 is plain decode (no drafter): {on[0]} has no effect; "
                         "set it to its default")
    if arm.proposer != "mtp":
        raise AtlasError(f"{where}: {on[0]} applies to the MTP proposer only (proposer={arm.proposer!r})")
    if arm.tree is not None:
        raise AtlasError(f"{where}: tree runs with {on[0]} off (a tree arm drafts with the head as loaded)")


def validate_model(model: ModelConfig) -> ModelConfig:
    where = f"model {model.name!r}"
    if model.init not in ("checkpoint", "random"):
        raise AtlasError(f"{where}: init={model.init!r} must be 'checkpoint' or 'random'")
    set_arch = [k for k in ARCH_FIELDS if getattr(model, k) is not None]
    if model.init == "checkpoint":
        if not model.path:
            raise AtlasError(f"{where}: model.path is required (e.g. model=path model.path=DIR)")
        if set_arch:
            raise AtlasError(f"{where}: model.{set_arch[0]} applies to init=random only; a checkpoint's "
                             "architecture comes from its config.json")
        return model
    if model.path:
        raise AtlasError(f"{where}: model.path is for init=checkpoint (use model=path model.path=DIR)")
    missing = [k for k in ARCH_FIELDS if getattr(model, k) is None]
    if missing:
        raise AtlasError(f"{where}: init=random needs model.{missing[0]}")
    for k in ARCH_FIELDS:
        _number(where, k, getattr(model, k), 1)
    if model.hidden_size % model.num_attention_heads:
        raise AtlasError(f"{where}: hidden_size={model.hidden_size} is not a multiple of "
                         f"num_attention_heads={model.num_attention_heads}")
    if model.num_attention_heads % model.num_key_value_heads:
        raise AtlasError(f"{where}: num_attention_heads={model.num_attention_heads} is not a multiple of "
                         f"num_key_value_heads={model.num_key_value_heads}")
    return model


def validate_workload(w: WorkloadConfig) -> WorkloadConfig:
    if w.corpus not in CORPUS_SOURCES:
        raise AtlasError(f"workload.corpus={w.corpus!r} must be one of {list(CORPUS_SOURCES)}")
    if w.split not in SPLITS:
        raise AtlasError(f"workload.split={w.split!r} must be one of {list(SPLITS)}")
    for key in ("n_docs", "turns", "chunk_tokens"):
        _number("workload", key, getattr(w, key), 1)
    # a turn's prefill commits its first token, so gen_tokens=1 would be a run of prefills with
    # no verify step: nothing to measure
    _number("workload", "gen_tokens", w.gen_tokens)
    if w.gen_tokens < 2:
        raise AtlasError(f"workload: gen_tokens={w.gen_tokens} is out of range >= 2 (a turn's prefill commits "
                         "its first token; a verify step needs a second)")
    _number("workload", "seed", w.seed)
    validate_sampling(w.sampling)
    return w


def validate_sampling(s: SamplingConfig) -> SamplingConfig:
    where = "workload.sampling"
    _number(where, "temperature", s.temperature, 0.0, MAX_TEMPERATURE, integer=False)
    _number(where, "top_p", s.top_p, integer=False)
    if not 0 < s.top_p <= 1:
        raise AtlasError(f"{where}: top_p={s.top_p} is out of range (0, 1]")
    _number(where, "top_k", s.top_k, 0)
    _number(where, "seed", s.seed, 0)
    if s.greedy:
        idle = [k for k, d in (("top_p", 1.0), ("top_k", 0), ("seed", 0)) if getattr(s, k) != d]
        if idle:
            raise AtlasError(f"{where}: {idle[0]}={getattr(s, idle[0])} has no effect at temperature=0 "
                             "(greedy verification); set workload.sampling.temperature")
    return s


def validate_arm_sampling(arm: ArmConfig, s: SamplingConfig) -> None:
    """An arm's draft policy has an effect only under a sampled workload."""
    if not s.greedy and arm.proposer in FAMILY_LEVERS:     # issue 49: their variable K is verified greedily only
        raise AtlasError(f"arm {arm.name!r}: proposer={arm.proposer} runs under greedy verification only "
                         "(workload.sampling.temperature=0)")
    if s.greedy:
        idle = [k for k in ("draft_policy", "draft_temperature") if getattr(arm, k) is not None]
        if idle:
            raise AtlasError(f"arm {arm.name!r}: {idle[0]} has no effect at workload.sampling.temperature=0 "
                             "(greedy verification)")


#: runner.gate_sequences=null: sequences gated per wave by device type. The CPU's check runs on the cores
#: the steps use; on a GPU its forward is one dense batch beside launch-bound steps (2 sequences were
#: 2.5% of the steps' time at 5.7B: bench/RESULTS.md, "Start-up and the gate").
GATE_SEQUENCES = {"cpu": 2, "cuda": 8}


def gate_sequences_for(r: RunnerConfig, device_type: str) -> int:
    """The sequences per wave the gate checks on a device of `device_type` (runner.gate_sequences, or
    its per-device default)."""
    return GATE_SEQUENCES.get(device_type, 2) if r.gate_sequences is None else r.gate_sequences


#: runner.fuse_bookkeeping=null compiles the bookkeeping when a run may take this many steps a wave (at
#: most turns x gen_tokens, one token a step) times its waves: compiling saves ~0.06 ms a step at 33.6M
#: and 5.7B (bench/RESULTS.md, "The runner step against the bare verify") and costs ~0.9 s a process
#: with a warm cache, 7-9 s cold ("Time to a verdict"); below it a run waits longer for the compile than
#: the compile saves it (the main job: 256 steps, 15 ms saved)
FUSE_MIN_STEPS = 16_000


def steps_bound(waves: int, turns: int, gen_tokens: int) -> int:
    """The most verify steps a run's waves can take: every step commits at least one token."""
    return waves * turns * gen_tokens


def fuse_for(r: RunnerConfig, steps: int) -> bool:
    """Whether a run of at most `steps` steps compiles its bookkeeping (runner.fuse_bookkeeping, or by size)."""
    return steps >= FUSE_MIN_STEPS if r.fuse_bookkeeping is None else bool(r.fuse_bookkeeping)


def validate_runner(r: RunnerConfig) -> RunnerConfig:
    _number("runner", "batch_width", r.batch_width, 1)
    if r.gate_sequences is not None:
        _number("runner", "gate_sequences", r.gate_sequences, 0)
    _number("runner", "threads", r.threads, 0)
    _number("runner", "replay_check_waves", r.replay_check_waves, 0)
    if r.mode not in RUN_MODES:
        raise AtlasError(f"runner.mode={r.mode!r} must be one of {', '.join(RUN_MODES)}")
    if r.mode == "replay" and not r.trajectories:
        raise AtlasError("runner.mode=replay needs runner.trajectories (the trajectory cache directory)")
    if r.dtype not in ("auto", "float32", "bfloat16", "float16"):
        raise AtlasError(f"runner.dtype={r.dtype!r} must be auto, float32, bfloat16 or float16")
    dev = r.device
    if not (dev in ("auto", "cpu", "cuda") or (dev.startswith("cuda:") and dev[5:].isdigit())):
        raise AtlasError(f"runner.device={dev!r} must be auto, cpu, cuda or cuda:N")
    return r


def validate_run(arm: ArmConfig, model: ModelConfig, workload: WorkloadConfig, runner: RunnerConfig) -> None:
    """Every check of a run's four configs, in the order their errors are reported: the session
    runs it before any model loads, and the Runner again for callers that build it directly."""
    validate_arm(arm)
    validate_model(model)
    validate_workload(workload)
    validate_arm_sampling(arm, workload.sampling)
    validate_runner(runner)
    validate_eagle3_run(arm, model, workload, runner)
    if arm.num_drafts == 0:
        if runner.mode != "live":
            raise AtlasError(f"arm {arm.name!r}: num_drafts=0 (plain decode) is timed live only: "
                             "runner.mode=replay has no target to time and no drafts to replay")
        if not workload.sampling.greedy:
            raise AtlasError(f"arm {arm.name!r}: num_drafts=0 (plain decode) runs greedy only "
                             "(workload.sampling.temperature=0)")
    # a tree arm: greedy (live, or replayed over the greedy trajectory: ReplayTarget.verify's tree), or
    # sampled live (speculative/tree_sampling.py); a coupled replay of a tree is not built
    if arm.tree is not None and workload.sampling.temperature > 0 and runner.mode != "live":
        raise AtlasError(f"arm {arm.name!r}: a sampled tree arm runs live only: runner.mode={runner.mode} "
                         "(coupled tree replay is not built); set runner.mode=live or workload.sampling.temperature=0")
    _validate_drafter_rows_workload(arm, workload)


# issue 49, EAGLE-3: the MTP head's levers it has no equivalent for (its handoff is the fc of its own
# features) or no test of (ORACLE_P2, TREE), and its head checked against the target before any load
EAGLE3_REFUSED = ("oracle_p2", "tree", "handoff_norm", "recycle_norm")


def validate_eagle3_arm(where: str, arm: ArmConfig) -> None:
    if arm.proposer != "eagle3":
        return
    off = {"oracle_p2": False, "tree": None, "handoff_norm": "checkpoint", "recycle_norm": "checkpoint"}
    on = [k for k in EAGLE3_REFUSED if getattr(arm, k) != off[k]]
    if on:
        raise AtlasError(f"{where}: {on[0]} applies to the MTP proposer only (proposer=eagle3 fuses its own "
                         "features and has no ORACLE_P2 or TREE); set it off or use proposer=mtp")


def validate_eagle3_run(arm: ArmConfig, model: ModelConfig, workload: WorkloadConfig, runner: RunnerConfig) -> None:
    """proposer=eagle3: model.eagle3_path set, and its config.json's feature layers in the target's
    (config.json files only: before any model loads); no sampled replay (its trajectory keeps the
    head's features, not the last hidden the target's logits are computed from)."""
    if arm.proposer != "eagle3":
        return
    if runner.mode == "replay" and not workload.sampling.greedy:
        raise AtlasError(f"arm {arm.name!r}: proposer=eagle3 replays greedy workloads only (its trajectory keeps "
                         "the target's features, not the hiddens a sampled replay takes logits of); set "
                         "runner.mode=live or workload.sampling.temperature=0")
    if not model.eagle3_path:
        raise AtlasError(f"arm {arm.name!r}: proposer=eagle3 needs model.eagle3_path (an EAGLE-3 head's directory)")
    from atlas_ab.config.eagle3 import check_layers, read_config
    from atlas_ab.config.paths import resolve_path

    if model.init == "checkpoint":
        check_layers(resolve_path(model.eagle3_path), resolve_path(model.path))
    else:
        ids = read_config(resolve_path(model.eagle3_path))["eagle_aux_hidden_state_layer_ids"]
        n = model.num_hidden_layers
        bad = [i for i in ids if not 0 <= i <= n]
        if bad:
            raise AtlasError(f"{model.eagle3_path}: EAGLE-3 feature layer {bad[0]} does not exist in the target "
                             f"({n} layers: ids 0..{n})")


def field_names(cls) -> list[str]:
    return [f.name for f in fields(cls)]
