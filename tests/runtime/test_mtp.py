"""The MTP module: checkpoint round trip, transformers reads the trunk, cached == uncached."""

import pytest
import torch

from atlas_ab.runtime import checkpoint as ckpt
from atlas_ab.runtime.args import ModelArgs
from atlas_ab.runtime.model import MTPModule, Transformer, init_weights

pytestmark = pytest.mark.float_sensitive

ARGS = ModelArgs(vocab_size=67, hidden_size=32, intermediate_size=72, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=8, rope_theta=1234.0,
                 num_nextn_predict_layers=1)


def models(own_head=False, tied=False):
    import dataclasses
    args = dataclasses.replace(ARGS, tie_word_embeddings=tied)
    torch.manual_seed(3)
    trunk = Transformer(args)
    init_weights(trunk, std=0.2)
    mtp = MTPModule(args, own_head=own_head)
    init_weights(mtp, std=0.2)
    with torch.no_grad():
        for p in list(trunk.parameters()) + list(mtp.parameters()):
            p.add_(torch.randn_like(p) * 0.05)             # norms != 1
    return args, trunk.eval(), mtp.eval().attach(trunk)


@pytest.mark.parametrize("own_head,tied", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_save_load_roundtrip(tmp_path, own_head, tied, dtype):
    args, trunk, mtp = models(own_head, tied)
    h = ckpt.save(tmp_path, args, trunk, mtp, tokenizer_json='{"version": "1.0"}', dtype=dtype)
    ck = ckpt.load(tmp_path, "cpu", torch.float32)
    assert ck.hash == h and h.startswith("sha256:") and ck.args == args
    assert ck.tokenizer_path and ck.tokenizer_path.endswith("tokenizer.json")
    assert (ck.mtp.shared_head.head is not None) == own_head
    for a, b in ((trunk, ck.trunk), (mtp, ck.mtp)):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys()
        for k in sa:
            assert torch.equal(sa[k].to(dtype).float(), sb[k]), k     # bf16 -> fp32 is exact
    if tied:
        assert ck.trunk.lm_head.weight is ck.trunk.model.embed_tokens.weight
    # a trunk-only save has no MTP
    ckpt.save(tmp_path / "t", args, trunk, None)
    ck2 = ckpt.load(tmp_path / "t", "cpu", torch.float32)
    assert ck2.mtp is None and ck2.args.num_nextn_predict_layers == 0 and ck2.tokenizer_path is None


@pytest.mark.slow        # imports transformers (~2 s); the whole suite runs it with the other transformers checks
def test_transformers_loads_trunk_of_mtp_checkpoint(tmp_path, caplog):
    transformers = pytest.importorskip("transformers")
    args, trunk, mtp = models()
    ckpt.save(tmp_path, args, trunk, mtp)                        # bf16 on disk
    ours = ckpt.load(tmp_path, "cpu", torch.float32).trunk
    hf, info = transformers.LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.float32,
                                                             output_loading_info=True)
    N = args.num_hidden_layers
    assert not info["missing_keys"] and not info["mismatched_keys"]
    assert info["unexpected_keys"] and all(k.startswith(f"model.layers.{N}.") for k in info["unexpected_keys"])
    toks = torch.randint(0, 67, (2, 13))
    with torch.no_grad():
        assert torch.allclose(hf(input_ids=toks).logits, ours.logits(ours.forward_train(toks)), atol=1e-5)

    # the report can be silenced with our ignore patterns on a subclass
    class Quiet(transformers.LlamaForCausalLM):
        _keys_to_ignore_on_load_unexpected = ckpt.hf_unexpected_patterns(args)

    _, info = Quiet.from_pretrained(tmp_path, dtype=torch.float32, output_loading_info=True)
    assert not info["unexpected_keys"] and not info["missing_keys"]


def test_mtp_cached_forward_equals_forward_train():
    args, trunk, mtp = models()
    B, T = 3, 11
    torch.manual_seed(4)
    tok = torch.randint(0, 67, (B, T))
    hid = torch.randn(B, T, args.hidden_size)
    pos = torch.arange(5, 5 + T).expand(B, T)                   # RoPE positions != slots
    with torch.no_grad():
        ref = mtp.forward_train(tok, hid, positions=pos)
        kv = mtp.new_kv([T, T + 3, T + 1])
        assert kv.n_layers == 1
        outs = []
        for a, b in ((0, 5), (5, 6), (6, 9), (9, 11)):
            slots = torch.arange(a, b).expand(B, b - a)
            outs.append(mtp.forward(tok[:, a:b], hid[:, a:b], pos[:, a:b], slots, kv, trunk.model.embed_tokens,
                                    length=b))
        got = torch.cat(outs, 1)
    assert torch.allclose(got, ref, atol=1e-5)
    assert torch.allclose(mtp.logits(got, trunk.lm_head), mtp.logits(ref), atol=1e-5)
    # embed/lm_head given as the trunk itself also works
    assert torch.equal(mtp.logits(ref, trunk), mtp.logits(ref))     # the same head on the same rows


def test_mtp_input_is_embedding_first():
    args, trunk, mtp = models()
    tok = torch.randint(0, 67, (1, 4))
    hid = torch.randn(1, 4, args.hidden_size)
    with torch.no_grad():
        want = torch.cat([mtp.enorm(trunk.model.embed_tokens(tok)), mtp.hnorm(hid)], -1) @ mtp.eh_proj.weight.T
        assert torch.allclose(mtp._input(tok, hid, None), want, atol=1e-6)
        out = mtp.forward_train(tok, hid)
        w = mtp.eh_proj.weight
        w.copy_(torch.cat([w[:, 32:], w[:, :32]], 1))          # the other order gives another output
        assert not torch.allclose(out, mtp.forward_train(tok, hid))
