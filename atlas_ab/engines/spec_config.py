"""`python -m atlas_ab.engines.spec_config +arm=NAME [overrides]`: an arm as each engine's speculative-decoding
configuration (config/engine_specs.py), so an arm of ours is a server a user can start; with `--vllm` first,
vLLM's JSON only, as our vLLM launcher takes it: `python -m atlas_ab.engines.vllm serve --speculative-config
"$(python -m atlas_ab.engines.spec_config --vllm +arm=ngram)"`.
"""
from __future__ import annotations

import json
import sys

from atlas_ab.config.engine_specs import sglang, trtllm, vllm
from atlas_ab.config.structured import ArmConfig


def lines(arm: ArmConfig) -> list[str]:
    """What the CLI prints: each engine's configuration, or why it has none."""
    out = [f"# atlas_ab arm {arm.name} (proposer={arm.proposer}, K={arm.num_drafts})",
           f"vllm: --speculative-config '{json.dumps(vllm(arm))}'"]
    flags, note = sglang(arm)
    out.append(f"sglang: {' '.join(flags)}  # {note}" if flags else f"# sglang: {note}")
    cfg, note = trtllm(arm)
    out.append(f"trtllm: speculative_config: {json.dumps(cfg)}  # {note}" if cfg else f"# trtllm: {note}")
    return out


def main(argv: list[str] | None = None) -> int:
    from atlas_ab.config.levers import arm_or_refusal

    argv = list(sys.argv[1:] if argv is None else argv)
    only_vllm = bool(argv) and argv[0] == "--vllm"
    arm = arm_or_refusal(argv[1:] if only_vllm else argv, "atlas_ab.engines.spec_config")
    if arm is None:
        return 2
    print(json.dumps(vllm(arm)) if only_vllm else "\n".join(lines(arm)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
