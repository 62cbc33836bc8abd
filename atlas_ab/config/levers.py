"""The lever table: every field of an arm, its type and range, and the engine's env var.

Two ways to set a lever, with deliberately different strictness:

* The Hydra path (`+arm=NAME`, `arm.<lever>=v`) is STRICT: a wrong key or type
  is rejected by the structured config, an out-of-range value or REFEED without
  CATCHUP by `structured.validate_arm`, each as a one-line error before anything
  loads.
* The env path (`arm_from_env`) parses `ATLAS_MTP_*` EXACTLY as the reference
  engine does (docs/reference_engine.md), clamps and fall-backs included: an
  unparsable DRAFT_CONF is 0, DRAFT_CONF=5 is 0.99, SHADOW_TOPK=99 is 8,
  REFEED_SHIFT=-9 is -4, a boolean is on only for the exact string "1". It
  answers "what would the engine run with this environment", so it never
  raises for a value (it does not validate combinations either: hand the
  result to `validate_arm` to run it).

`python -m atlas_ab.config.levers env +arm=NAME [overrides]` prints an arm as
shell-sourceable `ATLAS_MTP_*=value` lines, so the same arm can be handed to
the real engine (`set -a; . <(python -m atlas_ab.config.levers env +arm=refeed_on); set +a`).
`python -m atlas_ab.config.levers table` prints the table below as markdown.

Notes on names the reference engine does not fix:
* `ATLAS_MTP_NUM_DRAFTS` (K) is OURS: the engine derives K from its batch-width
  ladder and has no such variable. We parse it like SHADOW_TOPK (usize), clamp
  to [1, 8], and fall back to 2 (our default K) when unset or unparsable.
* `ATLAS_MTP_DRAFTER_PREFILL` and `ATLAS_MTP_ORACLE_P2` are named in the reference
  engine but their parse is not shown; we read them like the other switches
  (on only for exactly "1").
* `ATLAS_MTP_RING_PREFILL` (RING_PREFILL) is OURS: the reference engine never rings
  the turn prefill's last hidden. Parsed like its switches (on only for "1").
* The engine forces CATCHUP and REFEED off in multi-sequence MTP mode (its ring
  is single-sequence); this harness has a ring per sequence, so the env parse
  here does not model that force-off.
* `ATLAS_MTP_HANDOFF_NORM` and `ATLAS_MTP_RECYCLE_NORM` are OURS: which hidden
  the MTP layer is handed (pre or post the trunk's final norm; pre or post the
  MTP layer's own norm for drafts 2+). The value is `checkpoint`, `pre` or
  `post`, exactly (as the engine's switches are exact); anything else, or unset,
  is `checkpoint` (what the checkpoint declares).
* `ATLAS_GLM_MTP_HEAD_FP8` is the GLM head's kill switch, the one switch that is on unless its value is
  exactly "0" (unset, "", "1", "false" are all on): an empty environment parses as head_fp8 on, the
  engine's default, while ArmConfig's default (the baseline) stays off.
* `ATLAS_GLM_MTP_KV_FP8` (KV_FP8) is OURS: the GLM head's KV is FP8 by construction. Parsed like
  a switch (on only for "1").
* `ATLAS_GLM_MTP_PREFILL_FULL` is the GLM-5.3 head's own switch (`ok().as_deref() == Some("1")`,
  read there per context-row batch); `env` prints it beside the `ATLAS_MTP_*` lines. So is
  `ATLAS_GLM_MTP_SKIP` (`== Some("head")` / `Some("block")`, anything else off), written `none` when off.
* `ATLAS_MTP_PREFIX_REUSE` (PREFIX_REUSE) is OURS: the engine's prefix cache is a server setting, not
  a switch of its drafter; parsed like its switches (on only for "1"). `ATLAS_MTP_CARRY_DRAFTER` is
  the engine's, named there without its parse shown; read like the other switches.
* `proposer`, `row_space`, `ring_size` and `head_shards` (the engine's tensor-parallel world size)
  have no engine env var (they are properties of the model/engine build, not runtime switches); `env` prints them
  as comments.
"""
from __future__ import annotations

import math
import re
import struct
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from atlas_ab.config.structured import (
    DRAFT_POLICIES,
    DRAFTER_SKIPS,
    FAMILY_LEVERS,
    HANDOFF_CHOICES,
    MAX_TEMPERATURE,
    PROPOSERS,
    RANGES,
    ArmConfig,
)

# ----------------------------------------------------------------------------
# Rust `str::parse` grammars (no whitespace, ASCII digits only, no underscores).

_RUST_INT = re.compile(r"[+-]?[0-9]+\Z")
_RUST_UINT = re.compile(r"\+?[0-9]+\Z")
_RUST_FLOAT = re.compile(
    r"[+-]?(?:inf|infinity|nan|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\Z",
    re.IGNORECASE,
)
_USIZE_MAX = (1 << 64) - 1
_ISIZE_MIN, _ISIZE_MAX = -(1 << 63), (1 << 63) - 1
_F32_MAX = 3.4028234663852886e38


def parse_usize(v: Optional[str]) -> Optional[int]:
    """`v.parse::<usize>().ok()` (64-bit): None on any error, overflow included."""
    if v is None or not _RUST_UINT.match(v) or v == "+":
        return None
    n = int(v)
    return n if n <= _USIZE_MAX else None


def parse_isize(v: Optional[str]) -> Optional[int]:
    """`v.parse::<isize>().ok()` (64-bit): None on any error, overflow included."""
    if v is None or not _RUST_INT.match(v):
        return None
    n = int(v)
    return n if _ISIZE_MIN <= n <= _ISIZE_MAX else None


def _to_f32(x: float) -> float:
    if math.isnan(x) or math.isinf(x):
        return x
    if abs(x) > _F32_MAX:  # rounds to infinity in f32 (to within half an ulp; fine here)
        return math.copysign(math.inf, x)
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _f32_shortest(x: float) -> float:
    """The f32 value as the shortest decimal that round-trips in f32 (what Rust prints)."""
    if math.isnan(x) or math.isinf(x):
        return x
    for digits in range(1, 10):
        s = f"{x:.{digits}g}"
        if _to_f32(float(s)) == x:
            return float(s)
    return x


def parse_f32(v: Optional[str]) -> Optional[float]:
    """`v.parse::<f32>().ok()`, as a Python float holding the f32 value.

    Decimal -> f64 -> f32 can differ from Rust's direct decimal -> f32 rounding
    in the last ulp for adversarial inputs; irrelevant for a threshold in [0, 0.99].
    """
    if v is None or not _RUST_FLOAT.match(v):
        return None
    return _f32_shortest(_to_f32(float(v)))


def clamp(x, lo, hi):
    """Rust's `clamp` (NaN stays NaN)."""
    if isinstance(x, float) and math.isnan(x):
        return x
    return max(lo, min(hi, x))


# ----------------------------------------------------------------------------
# The reference engine's per-lever parses.

def env_switch(v: Optional[str]) -> bool:
    """CATCHUP / REFEED_ACCEPTED / REFEED_DEBUG: `ok().as_deref() == Some("1")`."""
    return v == "1"


def env_draft_conf(v: Optional[str]) -> float:
    """`parse::<f32>().ok().map(|t| t.clamp(0.0, 0.99)).unwrap_or(0.0)`.

    NaN parses and survives Rust's clamp; the engine then never gates (every
    `conf < NaN` is false), which is tau = 0, so NaN is returned as 0.0.
    """
    t = parse_f32(v)
    if t is None:
        return 0.0
    t = clamp(t, 0.0, 0.99)
    return 0.0 if math.isnan(t) else _f32_shortest(_to_f32(t))


def env_shadow_topk(v: Optional[str]) -> int:
    """`parse::<usize>().ok().unwrap_or(0).min(8)`."""
    n = parse_usize(v)
    return min(0 if n is None else n, 8)


def env_refeed_shift(v: Optional[str]) -> int:
    """`parse::<isize>().ok().unwrap_or(0).clamp(-4, 4)`."""
    n = parse_isize(v)
    return clamp(0 if n is None else n, -4, 4)


def env_num_drafts(v: Optional[str]) -> int:
    """OURS (not in the reference engine): usize parse, unset/unparsable -> 2, clamp [1, 8]."""
    n = parse_usize(v)
    return clamp(2 if n is None else n, 1, 8)


def env_handoff(v: Optional[str]) -> str:
    """OURS: HANDOFF_NORM / RECYCLE_NORM, exactly one of checkpoint | pre | post, else checkpoint."""
    return v if v in HANDOFF_CHOICES else "checkpoint"


def env_kill_switch(v: Optional[str]) -> bool:
    """HEAD_FP8: `std::env::var(..).as_deref() == Ok("0")` turns it OFF; anything else, unset included, is on."""
    return v != "0"


def env_drafter_skip(v: Optional[str]) -> str:
    """ATLAS_GLM_MTP_SKIP: `ok().as_deref() == Some("head")` / `Some("block")`; anything else: none."""
    return v if v in ("head", "block") else "none"


def _fmt_bool(b: bool) -> str:
    return "1" if b else "0"


def _fmt_float(x: float) -> str:
    return repr(float(x))


@dataclass(frozen=True)
class Lever:
    name: str                       # ArmConfig field
    type: type
    range: Any                      # (lo, hi) or a tuple of choices, or None
    env: Optional[str]              # the engine's env var (None: not an engine switch)
    parse: Optional[Callable[[Optional[str]], Any]]
    fmt: Optional[Callable[[Any], str]]
    ours: bool                      # the env name / parse is ours, not the reference engine's
    doc: str


LEVERS: tuple[Lever, ...] = (
    Lever("num_drafts", int, RANGES["num_drafts"], "ATLAS_MTP_NUM_DRAFTS", env_num_drafts, str, True,
          "K: drafts proposed per verify step"),
    Lever("drafter_prefill", bool, None, "ATLAS_MTP_DRAFTER_PREFILL", env_switch, _fmt_bool, False,
          "prefill the drafter's own KV over each turn's new context"),
    Lever("catchup", bool, None, "ATLAS_MTP_CATCHUP", env_switch, _fmt_bool, False,
          "ring serial-step hiddens, batch-feed the drafter's gap rows before a propose"),
    Lever("refeed", bool, None, "ATLAS_MTP_REFEED_ACCEPTED", env_switch, _fmt_bool, False,
          "rebuild accepted draft rows from the target's true hiddens (requires catchup)"),
    Lever("refeed_shift", int, RANGES["refeed_shift"], "ATLAS_MTP_REFEED_SHIFT", env_refeed_shift, str, False,
          "mapping validation: shift every re-fed ring label by this much"),
    Lever("ring_prefill", bool, None, "ATLAS_MTP_RING_PREFILL", env_switch, _fmt_bool, True,
          "ring the turn prefill's last hidden, so the catch-up rebuilds the first propose's row 0 after a "
          "full rejection (requires catchup)"),
    Lever("draft_conf", float, RANGES["draft_conf"], "ATLAS_MTP_DRAFT_CONF", env_draft_conf, _fmt_float, False,
          "tau: drop the drafts when the chain's min top-1 prob is below it (0 = off)"),
    Lever("shadow_topk", int, RANGES["shadow_topk"], "ATLAS_MTP_SHADOW_TOPK", env_shadow_topk, str, False,
          "log the drafter's top-k ids/probs per depth (0 = off; observational)"),
    Lever("oracle_p2", bool, None, "ATLAS_MTP_ORACLE_P2", env_switch, _fmt_bool, False,
          "probe draft 2 recomputed from the target's true hidden (observational)"),
    Lever("fingerprints", bool, None, "ATLAS_MTP_REFEED_DEBUG", env_switch, _fmt_bool, False,
          "FNV-1a fingerprints of ring/feed/propose hiddens (events/); default on iff the arm has a ring"),
    Lever("handoff_norm", str, HANDOFF_CHOICES, "ATLAS_MTP_HANDOFF_NORM", env_handoff, str, True,
          "the target hidden the MTP layer is handed: as the checkpoint declares, "
          "or pre / post the trunk's final norm"),
    Lever("recycle_norm", str, HANDOFF_CHOICES, "ATLAS_MTP_RECYCLE_NORM", env_handoff, str, True,
          "the drafter's own hidden for drafts 2+: as declared, or pre / post the MTP layer's final norm"),
    Lever("proposer", str, PROPOSERS, None, None, None, False,
          "the drafter family (proposers/registry.py): the MTP head, a draft model, EAGLE-3, n-gram or "
          "suffix decoding"),
    Lever("row_space", str, ("compact", "dense"), None, None, None, False,
          "drafter row space: compact (Qwen MtpHead) or dense (GLM-5.3 head)"),
    Lever("ring_size", int, RANGES["ring_size"], None, None, None, True,
          "per-sequence catch-up ring capacity (labels)"),
    Lever("draft_policy", str, DRAFT_POLICIES, None, None, None, True,
          "under a sampled workload: drafts drawn from the drafter's q (verified by min(1, p/q)) or its "
          "argmax (verified as a one-hot q); unset = sampled (a tree arm: greedy, its only policy)"),
    Lever("draft_temperature", float, (0.0, MAX_TEMPERATURE), None, None, None, True,
          "under a sampled workload: the temperature of the drafter's q; unset = the target's"),
    Lever("tree", str, None, None, None, None, True,
          "a static draft tree: its paths of child ranks, '[(0,), (1,), (0, 0)]', or top-k per depth, "
          "'topk:2,1'; unset = the linear K-chain"),
    # issue 50: HEAD_FP8 is the GLM head's kill switch (on unless exactly "0"): `arm_from_env({})` gives
    # head_fp8=True, what the engine runs; our ArmConfig keeps it off so every existing arm drafts as before
    Lever("head_fp8", bool, None, "ATLAS_GLM_MTP_HEAD_FP8", env_kill_switch, _fmt_bool, False,
          "draft with an FP8 E4M3 copy of the drafter's lm_head (per-row weight scales, a per-row activation "
          "scale); committed tokens unchanged. Engine default ON; ours OFF (the baseline drafts as before)"),
    Lever("kv_fp8", bool, None, "ATLAS_GLM_MTP_KV_FP8", env_switch, _fmt_bool, True,
          "the drafter's own KV rows stored as FP8 E4M3 (scale 1, saturating), read back in the compute "
          "dtype; the GLM head's KvCacheDtype::Fp8, which has no switch there"),
    Lever("head_shards", int, (1, 8), None, None, None, False,
          "the drafter head's top-1 over 1, 2, 4 or 8 vocabulary slices, each (max, argmax, sum exp), "
          "reduced (the engine's tensor-parallel ranks; no env var)"),
    Lever("prefill_full", bool, None, "ATLAS_GLM_MTP_PREFILL_FULL", env_switch, _fmt_bool, False,
          "context and catch-up rows through the drafter's whole block, as a propose runs it, instead of "
          "the KV-only shortcut (the same rows bit for bit; a diagnostic and cost arm)"),
    Lever("prefix_reuse", bool, None, "ATLAS_MTP_PREFIX_REUSE", env_switch, _fmt_bool, True,
          "each warm turn a new request over a prefix cache, as the engine serves a conversation: the "
          "target's prefill starts at the reused-prefix boundary, the drafter starts fresh and its prefill "
          "capture no-ops (DRAFTER_PREFILL: prefilled over the whole prompt); off: one request for all turns"),
    Lever("carry_drafter", bool, None, "ATLAS_MTP_CARRY_DRAFTER", env_switch, _fmt_bool, False,
          "under prefix_reuse: the drafter's rows carried from one turn's request to the next "
          "(take_drafter_kv / install_drafter_kv) instead of a fresh drafter"),
    Lever("drafter_skip", str, DRAFTER_SKIPS, "ATLAS_GLM_MTP_SKIP", env_drafter_skip, str, False,
          "timing arms: head skips the drafter's norm, lm_head and argmax (every draft is token 0), block "
          "skips its block (the head reads eh_proj's output); acceptance of either means nothing"),
    # issue 49: the weightless families' levers, named as vLLM's --speculative-config keys
    Lever("prompt_lookup_min", int, FAMILY_LEVERS["ngram"]["prompt_lookup_min"], None, None, None, False,
          "proposer=ngram: the shortest n-gram matched (vLLM `prompt_lookup_min`); unset = vLLM's rule"),
    Lever("prompt_lookup_max", int, FAMILY_LEVERS["ngram"]["prompt_lookup_max"], None, None, None, False,
          "proposer=ngram: the longest n-gram matched (vLLM `prompt_lookup_max`); unset = vLLM's rule"),
    Lever("suffix_decoding_max_tree_depth", int, FAMILY_LEVERS["suffix"]["suffix_decoding_max_tree_depth"], None,
          None, None, False, "proposer=suffix: the suffix trees' depth (match + drafts); unset = 24"),
    Lever("suffix_decoding_max_spec_factor", float, FAMILY_LEVERS["suffix"]["suffix_decoding_max_spec_factor"],
          None, None, None, False, "proposer=suffix: drafts at most this times the match length; unset = 1.0"),
    Lever("suffix_decoding_min_token_prob", float, FAMILY_LEVERS["suffix"]["suffix_decoding_min_token_prob"],
          None, None, None, False, "proposer=suffix: a draft's least estimated probability; unset = 0.1"),
    Lever("suffix_decoding_max_cached_requests", int, FAMILY_LEVERS["suffix"]["suffix_decoding_max_cached_requests"],
          None, None, None, False, "proposer=suffix: responses kept in the global tree (0 = none); unset = 10000"),
)
BY_NAME = {lv.name: lv for lv in LEVERS}
# (tests/config/test_lever_cli.py checks that every ArmConfig field has its row here)


def resolved_levers(arm: ArmConfig) -> dict:
    """The arm's levers as they take effect (fingerprints None -> on iff the arm has a ring)."""
    out = {lv.name: getattr(arm, lv.name) for lv in LEVERS}
    out["fingerprints"] = arm.fingerprints_on
    return out


def arm_from_env(environ: Mapping[str, str], name: str = "env") -> ArmConfig:
    """The arm the reference engine would run under `environ`, parsed as it parses (clamps included).

    Unset variables take the engine's default (off / 0; K = 2). Not validated:
    REFEED without CATCHUP parses as given (the engine would run it without
    its re-fed rows ever being fed) -- `validate_arm` rejects it if you run it.
    """
    arm = ArmConfig(name=name)
    for lv in LEVERS:
        if lv.env is not None:
            setattr(arm, lv.name, lv.parse(environ.get(lv.env)))
    return arm


_LOOKS_ON = {"true", "on", "yes", "y", "enable", "enabled", "t"}
_LOOKS_OFF = {"0", "false", "off", "no", "n", "disable", "disabled", "f"}


def env_report(environ: Mapping[str, str]) -> list[str]:
    """What `arm_from_env` read: each ATLAS_MTP_* variable, its value and what it became;
    a warning where a value that reads as "on" to a person parsed as off (the reference engine turns
    a switch on for exactly "1": `ATLAS_MTP_CATCHUP=true` is OFF in the engine too)."""
    arm = arm_from_env(environ)
    lines = []
    for lv in LEVERS:
        if lv.env is None:
            continue
        raw = environ.get(lv.env)
        got = getattr(arm, lv.name)
        if raw is None:
            lines.append(f"atlas_ab: {lv.env} unset -> {lv.name}={got!r} (the engine's default)")
            continue
        lines.append(f"atlas_ab: {lv.env}={raw!r} -> {lv.name}={got!r}")
        if lv.type is bool and not got and raw.strip().lower() in _LOOKS_ON:
            lines.append(f"atlas_ab: warning: {lv.env}={raw!r} reads as OFF: the engine turns it on only "
                         f"for exactly '1'")
        elif lv.parse is env_kill_switch and got and raw.strip().lower() in _LOOKS_OFF:
            lines.append(f"atlas_ab: warning: {lv.env}={raw!r} reads as ON: the engine turns it off only "
                         f"for exactly '0'")
        elif lv.type is not bool and raw.strip() and lv.parse(raw) != lv.parse(raw.strip()):
            lines.append(f"atlas_ab: warning: {lv.env}={raw!r} has surrounding spaces, which the engine's "
                         f"parse rejects (-> {got!r})")
    return lines


def arm_to_env(arm: ArmConfig) -> dict[str, str]:
    """The `ATLAS_MTP_*` assignment that makes `arm_from_env` give back the arm's levers."""
    res = resolved_levers(arm)
    return {lv.env: lv.fmt(res[lv.name]) for lv in LEVERS if lv.env is not None}


def env_lines(arm: ArmConfig) -> list[str]:
    lines = [f"# atlas_ab arm {arm.name}"]
    lines += [f"{k}={v}" for k, v in arm_to_env(arm).items()]
    lines += [f"# {lv.name}={getattr(arm, lv.name)} (no engine env var)" for lv in LEVERS if lv.env is None]
    return lines


def table_markdown() -> str:
    rows = ["| lever | type | range | env var | meaning |", "|---|---|---|---|---|"]
    for lv in LEVERS:
        rng = "" if lv.range is None else (
            f"[{lv.range[0]}, {lv.range[1]}]" if lv.type in (int, float) else " / ".join(lv.range))
        env = "-" if lv.env is None else f"`{lv.env}`" + (" (ours)" if lv.ours else "")
        rows.append(f"| `{lv.name}` | {lv.type.__name__} | {rng} | {env} | {lv.doc} |")
    return "\n".join(rows)


def compose_arm(overrides: list[str]) -> ArmConfig:
    """The validated arm that `python -m atlas_ab OVERRIDES` would run."""
    from hydra import compose, initialize_config_dir

    from atlas_ab.config.hydra_schema import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="levers"):
        return arm_of(compose(config_name="config", overrides=overrides))


def arm_or_refusal(overrides: list[str], prog: str) -> Optional[ArmConfig]:
    """`compose_arm`, or None after its refusal as one line `PROG: error: ...` on stderr (a bad key,
    value or combination); anything that is not a composition error (a bug) raises."""
    from atlas_ab.errors import one_line

    try:
        return compose_arm(overrides)
    except Exception as ex:  # noqa: BLE001 -- every composition error becomes one line
        msg = one_line(ex)
        if msg is None:
            raise
        print(f"{prog}: error: {msg}", file=sys.stderr)
        return None


def arm_of(cfg) -> ArmConfig:
    """A composed config's arm: its keys checked, its levers validated."""
    from omegaconf import OmegaConf

    from atlas_ab.config.hydra_schema import check_keys
    from atlas_ab.config.structured import validate_arm

    check_keys(cfg)
    return validate_arm(OmegaConf.to_object(cfg.arm))


def build_parser():
    import argparse

    p = argparse.ArgumentParser(prog="python -m atlas_ab.config.levers",
                                description="The lever table, and arms as the engine's ATLAS_MTP_* variables.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    e = sub.add_parser("env", help="print an arm as shell-sourceable ATLAS_MTP_* lines",
                       description="Print the arm `python -m atlas_ab OVERRIDES` would run as ATLAS_MTP_* "
                                   "lines (every variable, zeros included, so stale settings are overwritten).")
    e.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                   help="Hydra overrides as for python -m atlas_ab, e.g. +arm=refeed_on arm.refeed_shift=1")
    sub.add_parser("table", help="print the lever table as Markdown",
                   description="Print every lever: type, range, the engine's env var and its meaning.")
    return p


def main(argv: list[str] | None = None) -> int:
    from atlas_ab.errors import closed_stdout

    args = build_parser().parse_args(argv)
    try:
        if args.command == "table":
            print(table_markdown())
            return 0
        arm = arm_or_refusal(args.overrides, "atlas_ab.config.levers")
        if arm is None:
            return 2
        print("\n".join(env_lines(arm)))
        sys.stdout.flush()
        return 0
    except BrokenPipeError:
        return closed_stdout()


if __name__ == "__main__":
    sys.exit(main())
