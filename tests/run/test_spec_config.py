"""An arm as each engine's speculative-decoding configuration (atlas_ab/config/engine_specs.py; its CLI
atlas_ab/engines/spec_config.py)."""
import json
import subprocess
import sys

from atlas_ab.config import engine_specs as spec_config
from atlas_ab.config.structured import ArmConfig


def test_vllm_ngram_carries_the_resolved_lookup_bounds():
    assert spec_config.vllm(ArmConfig(proposer="ngram", num_drafts=3)) == {
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5, "prompt_lookup_max": 5}
    assert spec_config.vllm(ArmConfig(proposer="ngram", num_drafts=2, prompt_lookup_max=4))["prompt_lookup_min"] == 4


def test_vllm_suffix_carries_every_suffix_key_with_vllms_defaults():
    cfg = spec_config.vllm(ArmConfig(proposer="suffix", num_drafts=4, suffix_decoding_min_token_prob=0.3))
    assert cfg == {"method": "suffix", "num_speculative_tokens": 4, "suffix_decoding_max_tree_depth": 24,
                   "suffix_decoding_max_spec_factor": 1.0, "suffix_decoding_min_token_prob": 0.3,
                   "suffix_decoding_max_cached_requests": 10000}


def test_other_engines_write_ngram_and_say_where_they_have_nothing():
    flags, _ = spec_config.sglang(ArmConfig(proposer="ngram", num_drafts=2, prompt_lookup_min=2, prompt_lookup_max=3))
    assert flags[:2] == ["--speculative-algorithm", "NGRAM"] and "--speculative-ngram-max-match-window-size" in flags
    cfg, _ = spec_config.trtllm(ArmConfig(proposer="ngram", num_drafts=2, prompt_lookup_max=3))
    assert cfg["decoding_type"] == "NGram" and cfg["max_draft_len"] == 2 and cfg["max_matching_ngram_size"] == 3
    assert spec_config.sglang(ArmConfig(proposer="suffix"))[0] is None
    assert spec_config.trtllm(ArmConfig(proposer="suffix"))[0] is None


def test_the_cli_refuses_a_bad_lever_in_one_line():
    r = subprocess.run([sys.executable, "-m", "atlas_ab.engines.spec_config", "+arm=ngram", "arm.prompt_lookup_min=0"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "atlas_ab.engines.spec_config: error: arm 'ngram': prompt_lookup_min=0 is out of range [1, 64]"]


def test_the_vllm_flag_prints_the_json_our_launcher_takes():
    r = subprocess.run([sys.executable, "-m", "atlas_ab.engines.spec_config", "--vllm", "+arm=suffix",
                        "arm.num_drafts=3"], capture_output=True, text=True)
    assert r.returncode == 0
    assert json.loads(r.stdout)["method"] == "suffix" and json.loads(r.stdout)["num_speculative_tokens"] == 3


def test_vllm_families_with_weights_name_where_they_are():
    arm = ArmConfig(name="eagle3", proposer="eagle3", num_drafts=3)
    vllm = spec_config.vllm
    assert vllm(arm, "atlas_ab/models/eagle3") == {"method": "eagle3", "num_speculative_tokens": 3,
                                                   "model": "atlas_ab/models/eagle3"}
    assert vllm(arm)["model"].startswith("EAGLE3_HEAD_PATH")
    assert vllm(ArmConfig(name="d", proposer="draft_model"))["model"] == "DRAFT_MODEL_PATH"
