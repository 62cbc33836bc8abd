"""The shipped EAGLE-3 head on the shipped default model: its committed tokens are the target's greedy
decoding (ours recomputed without a cache, and transformers'), and the head is the one its training
record names, small enough to ship."""
import json
from pathlib import Path

import pytest
import torch

from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.eagle3 import EAGLE3Proposer
from atlas_ab.runtime import checkpoint, eagle3_checkpoint
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.workload.documents import Document
from tests.helpers.greedy_ref import greedy_without_cache, heldout_prompts, transformers_greedy

pytestmark = pytest.mark.float_sensitive

MODELS = Path(__file__).resolve().parents[2] / "atlas_ab" / "models"
DEFAULT, HEAD = MODELS / "default", MODELS / "eagle3"
N_NEW = 40


@pytest.fixture(scope="module")
def ck():
    return checkpoint.load(DEFAULT, device="cpu", dtype=torch.float32)


@pytest.fixture(scope="module")
def head():
    return eagle3_checkpoint.load(HEAD)[0]


@pytest.fixture(scope="module")
def prompts():
    return heldout_prompts()


@pytest.fixture(scope="module")
def greedy(ck, prompts):
    return greedy_without_cache(ck.trunk, prompts, N_NEW)


def decode(ck, head, prompts, arm):
    """One turn per prompt through the loop: the prompt's prefill, then N_NEW committed tokens."""
    docs = [Document(doc_id=i, name=f"p{i}", chunks=[p]) for i, p in enumerate(prompts)]
    prop = EAGLE3Proposer(ck.trunk, head, arm.row_space, arm.refeed)
    trace = Wave(LiveTarget(ck.trunk, features=prop.feature_layers), prop, arm, docs, N_NEW).run()
    return [g[0] for g in trace.generated], trace.steps.table().to_pandas()


ARMS = [ArmConfig(name="eagle3", proposer="eagle3", num_drafts=3, catchup=True, refeed=True, drafter_prefill=True),
        ArmConfig(name="eagle3_k2", proposer="eagle3", num_drafts=2)]


@pytest.mark.parametrize("arm", ARMS, ids=lambda a: a.name)
def test_eagle3_commits_the_targets_greedy(ck, head, prompts, greedy, arm):
    got, steps = decode(ck, head, prompts, arm)
    assert got == greedy
    assert steps.accept_len.max() >= 1          # the trained head gets drafts accepted


@pytest.mark.slow          # loads transformers
def test_eagle3_commits_transformers_greedy(ck, head, prompts, greedy):
    pytest.importorskip("transformers")
    theirs = transformers_greedy(ck, prompts, N_NEW)
    got, _ = decode(ck, head, prompts, ARMS[0])
    assert got == theirs == greedy


def test_the_shipped_head_is_its_training_record(ck):
    rec = json.loads((HEAD / "training.json").read_text())
    assert rec["checkpoint_hash"] == checkpoint.file_hash([HEAD / "config.json", HEAD / "model.safetensors"])
    assert rec["target_hash"] == ck.hash and rec["layers"] == [1, 3, 5]
    assert (HEAD / "model.safetensors").stat().st_size < 5 * 2 ** 20
    eagle3_checkpoint.check_layers(HEAD, DEFAULT)
