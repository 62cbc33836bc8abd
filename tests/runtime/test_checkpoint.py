"""Checkpoint loading: sharded files, hashing, load time, and one-line AtlasErrors for bad input."""
import json
import time

import pytest
import torch
from safetensors.torch import load_file, save_file

from atlas_ab import AtlasError
from atlas_ab.runtime import checkpoint as ckpt
from atlas_ab.runtime.args import ModelArgs
from atlas_ab.runtime.model import MTPModule, Transformer, init_weights

ARGS = ModelArgs(vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=8, num_nextn_predict_layers=1)


@pytest.fixture
def good(tmp_path):
    torch.manual_seed(0)
    trunk, mtp = Transformer(ARGS), MTPModule(ARGS)
    init_weights(trunk)
    init_weights(mtp)
    d = tmp_path / "good"
    ckpt.save(d, ARGS, trunk, mtp)
    return d


def bad(d, *words):
    with pytest.raises(AtlasError) as e:
        ckpt.load(d, "cpu", torch.float32)
    msg = str(e.value)
    assert "\n" not in msg, msg
    for w in words:
        assert w in msg, msg
    return msg


def edit(d, fn):
    f = d / "model.safetensors"
    t = load_file(f)
    fn(t)
    save_file(t, f, metadata={"format": "pt"})


def test_missing_directory(tmp_path):
    bad(tmp_path / "nope", "not found")


def test_missing_config(good):
    (good / "config.json").unlink()
    bad(good, "config.json")


def test_no_safetensors(good):
    (good / "model.safetensors").unlink()
    bad(good, "safetensors")


def test_pickle_only_is_refused(good):
    (good / "model.safetensors").unlink()
    (good / "pytorch_model.bin").write_bytes(b"\x80\x04 not unpickled")
    bad(good, "pytorch_model.bin", "safetensors is required")


def test_corrupt_header(good):
    f = good / "model.safetensors"
    b = bytearray(f.read_bytes())
    b[8:20] = b"#" * 12                     # inside the JSON header
    f.write_bytes(bytes(b))
    bad(good, "model.safetensors", "corrupt")


def test_truncated_file(good):
    f = good / "model.safetensors"
    f.write_bytes(f.read_bytes()[:5])
    bad(good, "corrupt")


def test_missing_tensor(good):
    edit(good, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    bad(good, "missing tensor model.layers.1.mlp.up_proj.weight")


def test_missing_mtp_tensor(good):
    edit(good, lambda t: t.pop("model.layers.2.eh_proj.weight"))
    bad(good, "model.layers.2.eh_proj.weight")


def test_extra_tensor(good):
    edit(good, lambda t: t.__setitem__("model.layers.0.self_attn.q_proj.bias", torch.zeros(16)))
    bad(good, "unexpected tensor model.layers.0.self_attn.q_proj.bias")


def test_misshaped_tensor(good):
    edit(good, lambda t: t.__setitem__("model.norm.weight", torch.ones(17)))
    bad(good, "model.norm.weight", "(17,)", "(16,)")


def test_rope_scaling_refused(good):
    cfg = json.loads((good / "config.json").read_text())
    cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
    (good / "config.json").write_text(json.dumps(cfg))
    bad(good, "yarn")
    cfg["rope_scaling"] = None
    cfg["rope_parameters"] = {"rope_type": "llama3", "rope_theta": 1e4}
    (good / "config.json").write_text(json.dumps(cfg))
    bad(good, "llama3")


def test_bad_config_json(good):
    (good / "config.json").write_text("{not json")
    bad(good, "config.json")
    (good / "config.json").write_text(json.dumps({"model_type": "gpt2", "hidden_size": 8}))
    bad(good, "gpt2")


def test_sharded_load_and_hash(good, tmp_path):
    ref = ckpt.load(good, "cpu", torch.float32)
    t = load_file(good / "model.safetensors")
    d = tmp_path / "sharded"
    d.mkdir()
    (d / "config.json").write_bytes((good / "config.json").read_bytes())
    keys = sorted(t)
    wm = {}
    for i, part in enumerate((keys[: len(keys) // 2], keys[len(keys) // 2:])):
        name = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({k: t[k] for k in part}, d / name, metadata={"format": "pt"})
        wm.update({k: name for k in part})
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    ck = ckpt.load(d, "cpu", torch.float32)
    assert ck.hash != ref.hash and ck.mtp is not None
    for k, v in ref.trunk.state_dict().items():
        assert torch.equal(v, ck.trunk.state_dict()[k])
    assert ckpt.load(d, "cpu", torch.float32).hash == ck.hash     # deterministic
    (d / "model-00002-of-00002.safetensors").unlink()
    bad(d, "model-00002-of-00002.safetensors", "missing")


def test_load_time_6m_params(tmp_path):
    args = ModelArgs(vocab_size=4096, hidden_size=256, intermediate_size=688, num_hidden_layers=6,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_nextn_predict_layers=1)
    trunk, mtp = Transformer(args), MTPModule(args)
    ckpt.save(tmp_path, args, trunk, mtp)
    ckpt.load(tmp_path, "cpu", torch.float32)        # warm the page cache
    t = time.perf_counter()
    ck = ckpt.load(tmp_path, "cpu", torch.float32)
    dt = time.perf_counter() - t
    n = sum(p.numel() for p in ck.trunk.parameters()) + sum(p.numel() for p in ck.mtp.parameters())
    assert n > 6e6
    assert dt < 2.0, dt


def test_a_linked_tokenizer_is_read_through_and_a_save_writes_its_own(good, tmp_path):
    """A shipped checkpoint may link its tokenizer.json to another's (models/draft -> default): loading
    reads through the link, and saving into that directory replaces the link, never its target."""
    shared = tmp_path / "shared.json"
    shared.write_text('{"model": "shared"}')
    (good / "tokenizer.json").symlink_to(shared)
    assert ckpt.load(good, "cpu", torch.float32).tokenizer_path == str(good / "tokenizer.json")
    torch.manual_seed(0)
    trunk, mtp = Transformer(ARGS), MTPModule(ARGS)
    ckpt.save(good, ARGS, trunk, mtp, tokenizer_json='{"model": "own"}')
    assert not (good / "tokenizer.json").is_symlink()
    assert (good / "tokenizer.json").read_text() == '{"model": "own"}'
    assert shared.read_text() == '{"model": "shared"}'
