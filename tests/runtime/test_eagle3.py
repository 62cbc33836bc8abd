"""The EAGLE-3 head (runtime/eagle3.py): the feature fusion's literal shapes, the target's taps, the
training-time test against the cached forward, and its checkpoint in vLLM's eagle3 layout."""
import json

import pytest
import torch

from atlas_ab import AtlasError
from atlas_ab.runtime import eagle3_checkpoint
from atlas_ab.runtime.eagle3 import Eagle3Head
from atlas_ab.runtime.model import Transformer, init_weights
from atlas_ab.train.eagle3 import head_args, unroll
from tests.helpers.tiny import tiny_args

pytestmark = pytest.mark.float_sensitive

# vLLM 0.32's Eagle3LlamaForCausalLM.load_weights reads exactly these (it prefixes "model." and maps
# "midlayer." to "layers.0."; no embed_tokens: the target's is shared)
VLLM_NAMES = ["fc.weight", "lm_head.weight", "midlayer.hidden_norm.weight", "midlayer.input_layernorm.weight",
              "midlayer.mlp.down_proj.weight", "midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight",
              "midlayer.post_attention_layernorm.weight", "midlayer.self_attn.k_proj.weight",
              "midlayer.self_attn.o_proj.weight", "midlayer.self_attn.q_proj.weight",
              "midlayer.self_attn.v_proj.weight", "norm.weight"]


@pytest.fixture(scope="module")
def parts():
    torch.manual_seed(0)
    args = tiny_args(layers=3, mtp=0)             # H 32, 4 heads of 8, 2 KV heads, vocab 48
    trunk = Transformer(args)
    init_weights(trunk, std=0.3)
    head = Eagle3Head(head_args(args), (0, 2, 3), args.hidden_size)
    init_weights(head, std=0.3)
    return trunk.eval(), head.eval()


def test_feature_fusion_shapes(parts):
    trunk, head = parts
    tok = torch.randint(0, 48, (2, 5))
    h, feats = trunk.forward_train_features(tok, head.layers)
    assert tuple(h.shape) == (2, 5, 32) and tuple(feats.shape) == (2, 5, 96)        # 3 layers x H
    assert tuple(head.fc.weight.shape) == (32, 96)                                   # fc: 3H -> H
    assert tuple(head.combine(feats).shape) == (2, 5, 32)
    attn = head.midlayer.self_attn
    # layer 0 reads [embedding, hidden]: 2H in (vLLM's qkv_input_size = 2 * hidden_size)
    assert [tuple(getattr(attn, n).weight.shape) for n in ("q_proj", "k_proj", "v_proj", "o_proj")] == \
        [(32, 64), (16, 64), (16, 64), (32, 32)]
    out = head.forward_train(tok, head.combine(feats), trunk.model.embed_tokens)
    assert tuple(out.shape) == (2, 5, 32) and tuple(head.logits(out).shape) == (2, 5, 48)
    assert sorted(head.state_dict()) == VLLM_NAMES


def test_taps_are_the_residual_streams(parts):
    """Id 0 is the embedding, id 2 the stream entering layer 2, id 3 (= num_hidden_layers) the last
    layer's output: the trunk's own pre-norm hidden."""
    trunk, head = parts
    tok = torch.randint(0, 48, (2, 6))
    h, feats = trunk.forward_train_features(tok, (0, 2, 3))
    H = 32
    assert torch.equal(feats[..., :H], trunk.model.embed_tokens(tok))
    assert torch.equal(feats[..., 2 * H:], h) and torch.equal(h, trunk.forward_train(tok))
    x = trunk.model.embed_tokens(tok)
    for layer in trunk.model.layers[:2]:
        from atlas_ab.runtime.model import rope_cos_sin, train_ctx
        cos, sin = rope_cos_sin(torch.arange(6).expand(2, 6), trunk.args.head_dim, trunk.args.rope_theta, x.dtype)
        x = layer(x, cos, sin, train_ctx(6, x.device, None), 0)
    torch.testing.assert_close(feats[..., H:2 * H], x, atol=1e-6, rtol=0)


def test_cached_features_equal_the_uncached_ones(parts):
    trunk, head = parts
    tok = torch.randint(0, 48, (2, 7))
    kv = trunk.new_kv([8, 8])
    pos = torch.arange(7).expand(2, 7)
    h, feats = trunk.forward_features(tok, pos, pos, kv, head.layers, length=7)
    h2, feats2 = trunk.forward_train_features(tok, head.layers)
    torch.testing.assert_close(feats, feats2, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(h, h2, atol=1e-5, rtol=1e-5)


def test_training_time_test_is_the_inference_path(parts):
    """Step 0 of the unroll is the head's forward over the target's rows; step 1 at the last row is
    the cached draft 2 of that chain (KV: step 0's rows, then the chain's own row), to fp32 rounding."""
    trunk, head = parts
    T = 6
    tok = torch.randint(0, 48, (1, T + 3))
    _, feats = trunk.forward_train_features(tok[:, :T], head.layers)
    embed = trunk.model.embed_tokens
    z = list(unroll(head, embed, feats, tok, 2))
    hid = head.combine(feats)
    out0 = head.forward_train(tok[:, 1:T + 1], hid, embed)
    torch.testing.assert_close(z[0], head.logits(out0), atol=1e-5, rtol=1e-5)
    kv = head.new_kv([T + 2])
    pos = torch.arange(T)[None]
    head.forward(tok[:, 1:T + 1], hid, pos, pos, kv, embed, length=T)
    out1 = head.forward(tok[:, T + 1:T + 2], out0[:, -1:], torch.tensor([[T]]), torch.tensor([[T]]), kv, embed,
                        length=T + 1)
    torch.testing.assert_close(z[1][:, -1], head.logits(out1)[:, 0], atol=1e-5, rtol=1e-5)


def test_checkpoint_round_trip_in_vllms_layout(parts, tmp_path):
    trunk, head = parts
    eagle3_checkpoint.save(tmp_path, head, trunk.args, dtype=torch.float32)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    ids = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert cfg["eagle_aux_hidden_state_layer_ids"] == [0, 2, 3] == ids
    assert cfg["draft_vocab_size"] == cfg["vocab_size"] == 48 and cfg["target_hidden_size"] == 32
    from safetensors.torch import load_file
    assert sorted(load_file(str(tmp_path / "model.safetensors"))) == VLLM_NAMES
    back, digest = eagle3_checkpoint.load(tmp_path)
    assert digest.startswith("sha256:") and back.layers == (0, 2, 3)
    for k, v in head.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k


def test_feature_layers_the_target_lacks_are_one_line(parts, tmp_path):
    trunk, head = parts
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 32}))
    eagle3_checkpoint.save(tmp_path / "h", head, trunk.args)
    with pytest.raises(AtlasError, match=r"h: EAGLE-3 feature layer 3 does not exist in the target .*target "
                                         r"\(2 layers: ids 0..2\)"):
        eagle3_checkpoint.check_layers(tmp_path / "h", target)
    cfg = json.loads((tmp_path / "h" / "config.json").read_text())
    for bad, msg in (({"eagle_aux_hidden_state_layer_ids": [3, 0]}, "must be strictly increasing"),
                     ({"architectures": ["LlamaForCausalLM"]}, "is not an EAGLE-3 Llama head"),
                     ({"draft_vocab_size": 16}, "reduced draft vocabulary")):
        (tmp_path / "h" / "config.json").write_text(json.dumps({**cfg, **bad}))
        with pytest.raises(AtlasError, match=msg):
            eagle3_checkpoint.read_config(tmp_path / "h")


def test_default_layers():
    assert eagle3_checkpoint.default_layers(6) == [1, 3, 5]        # vLLM's (2, 3, 3) collapses at 6 layers
    assert eagle3_checkpoint.default_layers(8) == [2, 4, 5]        # vLLM's (2, L//2, L-3)
    assert eagle3_checkpoint.default_layers(32) == [2, 16, 29]
