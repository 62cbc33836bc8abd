"""The ladder's vLLM config, served as written (issue 48): `analysis ladder`'s writer puts vLLM's
speculative_config object in vllm_speculative_config.json, `python -m atlas_ab.engines.vllm serve
--speculative-config FILE` hands it to vLLM unchanged, and vLLM applies its schedule: at batch size 1
every verify step drafts the K of the range that holds 1, not the maximum."""
import json

import numpy as np
import pytest

from atlas_ab.analysis.ladder import acceptance_of, fit, write_configs
from atlas_ab.collect.client import http
from atlas_ab.engines.vllm.__main__ import build_parser, speculative_config
from tests.helpers.vllm_engine import ROOT, served

# Twelve documents: K=1 accepts 3 of 4 steps (E_1 = 1.75), K=2 accepts 2, 2, 1, 2 (E_2 = 2.75). At B=1
# K=2's step costs twice K=1's, so K=1 serves (1,659 vs 1,372 tokens/s); at B=4 K=2 serves (3,432 vs 2,329).
DOCS = np.repeat(np.arange(12), 4)
TIMES = {(1, 0): [1.0, 1.01], (1, 1): [1.05, 1.06], (1, 2): [2.0, 2.01],
         (4, 0): [2.0, 2.01], (4, 1): [3.0, 3.01], (4, 2): [3.2, 3.21]}
CONFIG = {"method": "mtp", "num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[1, 3, 1], [4, 4, 2]]}
FIXTURE = ROOT / "tests" / "fixtures" / "vllm_0.32" / "detailed" / "responses.jsonl"


def ladder_config(tmp_path):
    acc = {1: acceptance_of(1, DOCS, np.array([1, 1, 1, 0] * 12)),
           2: acceptance_of(2, DOCS, np.array([2, 2, 1, 2] * 12))}
    res = fit(acc, {c: np.array(t) for c, t in TIMES.items()}, n_boot=0)
    assert res.ladder == {1: 1, 4: 2}
    # one timing job per cell: a single-replicate ladder, written only with the flag (its note beside the file)
    return write_configs(res, tmp_path / "ladder", allow_single=True)["vllm"]


def test_the_written_file_is_the_object_the_launcher_hands_to_vllm(tmp_path):
    f = ladder_config(tmp_path)
    assert json.loads(f.read_text()) == CONFIG            # no wrapper: SpeculativeConfig forbids extra fields
    args = build_parser().parse_args(["serve", "--speculative-config", str(f)])
    assert speculative_config(args) == CONFIG


@pytest.mark.slow
@pytest.mark.vllm
def test_the_ladders_vllm_config_starts_vllm_as_written(tmp_path):
    f = ladder_config(tmp_path)
    with served("--speculative-config", str(f)) as state:
        i = state["command"].index("--speculative-config")
        assert json.loads(state["command"][i + 1]) == CONFIG
        rec = json.loads(FIXTURE.read_text().splitlines()[0])     # a K=2 server's answer to this request
        got = http("POST", state["url"] + "/completions", rec["request"], 300)
    spec = got["metrics"]["speculative_decoding"]
    assert spec["num_spec_tokens"] == 2 and spec["num_spec_steps"] >= 1
    assert set(spec["per_step_drafted"]) == {1}                    # batch size 1: the range [1, 3]'s K
    assert len(spec["acceptance_histogram"]) == 3 and spec["acceptance_histogram"][2] == 0
    # greedy: speculation changes no token
    assert got["choices"][0]["token_ids"] == rec["response"]["choices"][0]["token_ids"]
