"""The MiMo export computes our model (fast, no engine): transformers' Qwen2 on the exported trunk gives
the shipped Llama checkpoint's logits, our loader reads the export's MTP layer with MiMo's wiring, and
a second export into the same cache is the first one, read back."""
import json
from pathlib import Path

import pytest
import torch

from atlas_ab.engines.vllm.export import EXPORT_JSON, exported
from atlas_ab.runtime import checkpoint
from tests.helpers.vllm_engine import ROOT

transformers = pytest.importorskip("transformers")
DEFAULT = ROOT / "atlas_ab/models/default"


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return exported(DEFAULT, tmp_path_factory.mktemp("models"))


def test_the_exported_trunk_gives_the_checkpoints_logits(out):
    ids = torch.tensor([[483, 288, 1527, 268, 583, 1029, 8, 78, 309, 264, 391, 962]])
    with torch.no_grad():
        ref = transformers.LlamaForCausalLM.from_pretrained(str(DEFAULT), dtype=torch.float32)(ids).logits
        got = transformers.Qwen2ForCausalLM.from_pretrained(out["path"], dtype=torch.float32)(ids).logits
    # the same weights (zero q/k/v biases added): equal up to the float32 rounding of two code paths
    assert torch.allclose(got, ref, atol=1e-4, rtol=0)
    assert torch.equal(got.argmax(-1), ref.argmax(-1))


def test_the_export_declares_mimos_wiring_and_is_reused(out):
    ck = checkpoint.load(out["path"])
    assert ck.layout.name == "mimo" and ck.mtp.hidden_first and ck.mtp.zero_first_embed
    assert (ck.layout.handoff_norm, ck.layout.recycle_norm) == ("pre", "post")
    cfg = json.loads((Path(out["path"]) / "config.json").read_text())
    assert cfg["architectures"] == ["MiMoForCausalLM"] and cfg["model_type"] == "qwen2"
    again = exported(DEFAULT, Path(out["path"]).parent)          # read back, not written again
    assert again == out and "path" not in json.loads((Path(out["path"]) / EXPORT_JSON).read_text())


def test_the_trunk_alone_for_eagle3_is_qwen2_without_the_mtp_layer(tmp_path):
    """`serve --method eagle3`: vLLM's Qwen2 hands the head its aux hidden states (MiMo's forward does not),
    so the target is exported as its trunk alone, with the MiMo export's logits."""
    from safetensors import safe_open

    trunk = exported(DEFAULT, tmp_path, mtp=False)
    assert Path(trunk["path"]).name.endswith("-trunk")
    cfg = json.loads((Path(trunk["path"]) / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen2ForCausalLM"] and cfg.get("num_nextn_predict_layers", 0) == 0
    with safe_open(str(Path(trunk["path"]) / "model.safetensors"), "pt") as f:
        assert not any("mtp" in k or k.startswith(f"model.layers.{cfg['num_hidden_layers']}.") for k in f.keys())
    ids = torch.tensor([[483, 288, 1527, 268, 583, 1029, 8, 78, 309, 264, 391, 962]])
    with torch.no_grad():
        ref = transformers.LlamaForCausalLM.from_pretrained(str(DEFAULT), dtype=torch.float32)(ids).logits
        got = transformers.Qwen2ForCausalLM.from_pretrained(trunk["path"], dtype=torch.float32)(ids).logits
    assert torch.allclose(got, ref, atol=1e-4, rtol=0) and torch.equal(got.argmax(-1), ref.argmax(-1))
