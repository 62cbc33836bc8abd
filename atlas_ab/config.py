"""Structured configs: arm (the levers), model, workload, runner, study.

These dataclasses are the schema Hydra validates against (see `schema.py` for
the ConfigStore registration): a wrong key or a wrong type is rejected by
OmegaConf, an out-of-range value by `validate()` below, both before any model
loads. Each lever's meaning lives in `levers.py`.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from atlas_ab import AtlasError

#: The directory that holds the atlas_ab package (the repo root in a checkout).
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class ArmConfig:
    name: str = "baseline"
    proposer: str = "mtp"            # mtp | draft_model
    num_drafts: int = 2              # K
    row_space: str = "compact"       # compact (Qwen MtpHead) | dense (GLM-5.3 head)
    drafter_prefill: bool = False    # DRAFTER_PREFILL: prefill the drafter on every turn
    catchup: bool = False            # CATCHUP
    refeed: bool = False             # REFEED (requires catchup)
    refeed_shift: int = 0            # SHIFT, in [-4, 4]
    draft_conf: float = 0.0          # DRAFT_CONF tau, in [0, 0.99]
    shadow_topk: int = 0             # SHADOW_TOPK, in [0, 8]
    oracle_p2: bool = False          # ORACLE_P2 (observational)
    fingerprints: Optional[bool] = None  # FINGERPRINTS; None = on iff the arm has a ring
    ring_size: int = 64              # per-sequence catch-up ring capacity (labels)

    @property
    def has_ring(self) -> bool:
        return self.catchup or self.refeed

    @property
    def fingerprints_on(self) -> bool:
        return self.has_ring if self.fingerprints is None else bool(self.fingerprints)


@dataclass
class ModelConfig:
    name: str = "default"
    path: Optional[str] = "atlas_ab/models/default"   # HF checkpoint dir (relative to the repo / package)
    draft_path: Optional[str] = None        # the draft-model proposer's checkpoint dir
    init: str = "checkpoint"                # checkpoint | random (GPU preset for throughput work)
    # Architecture for init=random (ignored for checkpoints).
    hidden_size: int = 512
    num_hidden_layers: int = 8
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    intermediate_size: int = 1408
    vocab_size: int = 4096


@dataclass
class WorkloadConfig:
    corpus: str = "stdlib"      # stdlib (Python source) | pydoc (language reference prose)
    split: str = "heldout"      # heldout | train
    n_docs: int = 16
    turns: int = 8
    chunk_tokens: int = 64      # tokens appended to the context at each turn
    gen_tokens: int = 32        # tokens generated per turn (exactly)
    seed: int = 0


@dataclass
class RunnerConfig:
    device: str = "auto"        # auto | cpu | cuda | cuda:N
    dtype: str = "auto"         # auto (fp32 on CPU, bf16 on GPU) | float32 | bfloat16
    batch_width: int = 16       # sequences verified together; also the shard unit
    gate_sequences: int = 2     # sequences per wave replayed target-only (lossless gate)
    seed: int = 0
    progress: bool = True       # tqdm bar on a TTY (never affects results; ignored by resume's check)
    resume: Optional[str] = None  # PATH of an interrupted run to continue, or "auto" (this job's own dir)
    impl: str = "atlas_ab.runner:Runner"  # the engine class driven (module:Class); tests plug a double here
    cuda_graphs: bool = True    # replay the verify and draft steps from CUDA graphs (GPU only)


@dataclass
class StudyConfig:
    name: str = ""
    prereg: Optional[str] = None    # path to analysis/prereg/*.yaml
    arms: List[str] = field(default_factory=list)   # the arm names the study compares


_RANGES = {
    "num_drafts": (1, 8),
    "refeed_shift": (-4, 4),
    "draft_conf": (0.0, 0.99),
    "shadow_topk": (0, 8),
    "ring_size": (8, 1 << 16),
}


def resolve_path(p: Optional[str]) -> Optional[str]:
    """A config path made absolute without depending on Hydra's cwd.

    Absolute paths stay. A relative path is looked up under the directory the
    command was launched from (hydra.job.chdir is false, so that is os.getcwd()),
    then under the package root (the directory holding atlas_ab/, i.e. the repo
    in a checkout, site-packages in an install); when neither exists the
    package-root form is returned so that the error names it.
    """
    if p is None or p == "":
        return p
    pp = Path(os.path.expanduser(str(p)))
    if pp.is_absolute():
        return str(pp)
    here = Path.cwd() / pp
    if here.exists():
        return str(here.resolve())
    return str((PACKAGE_ROOT / pp).resolve())


def validate_arm(arm: ArmConfig) -> ArmConfig:
    """Strict check of an arm (the Hydra path). One-line AtlasError on the first problem."""
    for key, (lo, hi) in _RANGES.items():
        v = getattr(arm, key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and math.isnan(v)):
            raise AtlasError(f"arm {arm.name!r}: {key}={v!r} is not a number")
        if not lo <= v <= hi:
            raise AtlasError(f"arm {arm.name!r}: {key}={v} is out of range [{lo}, {hi}]")
    if arm.proposer not in ("mtp", "draft_model"):
        raise AtlasError(f"arm {arm.name!r}: proposer={arm.proposer!r} must be 'mtp' or 'draft_model'")
    if arm.row_space not in ("compact", "dense"):
        raise AtlasError(f"arm {arm.name!r}: row_space={arm.row_space!r} must be 'compact' or 'dense'")
    if arm.refeed and not arm.catchup:
        raise AtlasError(f"arm {arm.name!r}: refeed=true requires catchup=true "
                         "(the re-feed's rows are rebuilt by the catch-up feed)")
    if arm.refeed_shift != 0 and not arm.refeed:
        raise AtlasError(f"arm {arm.name!r}: refeed_shift={arm.refeed_shift} has no effect without refeed=true")
    if arm.proposer == "draft_model":
        mtp_only = [k for k in ("catchup", "refeed", "oracle_p2", "drafter_prefill") if getattr(arm, k)]
        if mtp_only:
            raise AtlasError(f"arm {arm.name!r}: {', '.join(mtp_only)} apply to the MTP proposer only")
    if arm.oracle_p2 and arm.num_drafts < 2:
        raise AtlasError(f"arm {arm.name!r}: oracle_p2 needs num_drafts >= 2 (it re-computes draft 2)")
    return arm
