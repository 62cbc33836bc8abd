"""Our runtime vs transformers' own models on tiny random checkpoints of each layout (fp32, CPU)."""

import pytest
import torch

pytestmark = pytest.mark.float_sensitive

transformers = pytest.importorskip("transformers")

from atlas_ab.runtime import ModelArgs, checkpoint as ckpt

COMMON = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5)

LAYOUTS = {
    "llama_gqa_untied": ("LlamaConfig", "LlamaForCausalLM", dict(rope_theta=500.0)),
    "llama_tied": ("LlamaConfig", "LlamaForCausalLM", dict(tie_word_embeddings=True, num_key_value_heads=4)),
    "qwen2_bias": ("Qwen2Config", "Qwen2ForCausalLM", dict(rope_theta=1e6)),
    "qwen3_qknorm": ("Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=24, num_key_value_heads=1)),
    "mistral_window": ("MistralConfig", "MistralForCausalLM", dict(sliding_window=9)),
}


def _rope_kwargs(cfg_cls, extra):
    extra = dict(extra)
    theta = extra.pop("rope_theta", None)
    if theta is not None:
        extra["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    return extra


def make_hf(tmp_path, layout):
    cfg_name, model_name, extra = LAYOUTS[layout]
    cfg = getattr(transformers, cfg_name)(**{**COMMON, **_rope_kwargs(cfg_name, extra)})
    torch.manual_seed(hash(layout) % 1000)
    m = getattr(transformers, model_name)(cfg).eval()
    with torch.no_grad():        # perturb everything (biases and norms included) so every weight matters
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    d = tmp_path / layout
    m.save_pretrained(d, safe_serialization=True)
    return m, d


@pytest.fixture(scope="module", params=list(LAYOUTS))
def pair(request, tmp_path_factory):
    hf, d = make_hf(tmp_path_factory.mktemp("hf"), request.param)
    ck = ckpt.load(d, "cpu", torch.float32)
    return request.param, hf, ck.trunk


def hf_logits(hf, toks):
    with torch.no_grad():
        return hf(input_ids=toks).logits.float()


def test_config_roundtrip(pair):
    layout, hf, ours = pair
    a = ours.args
    assert ModelArgs.from_hf(a.to_hf()) == a
    if layout == "qwen3_qknorm":
        assert a.qk_norm and a.head_dim == 24
    if layout == "qwen2_bias":
        assert a.attention_bias and not a.o_bias
    if layout == "mistral_window":
        assert a.sliding_window == 9


def test_forward_train_matches_hf(pair):
    layout, hf, ours = pair
    torch.manual_seed(0)
    toks = torch.randint(0, 97, (3, 21))
    with torch.no_grad():
        got = ours.logits(ours.forward_train(toks))
    assert torch.allclose(got, hf_logits(hf, toks), atol=1e-5, rtol=1e-5)


def test_cached_greedy_and_verify_match_hf(pair):
    layout, hf, ours = pair
    torch.manual_seed(1)
    prompt = torch.randint(0, 97, (1, 7))
    kv = ours.new_kv([64])
    seq = prompt[0].tolist()
    rows = {}                                              # position -> our logits row
    with torch.no_grad():
        P = prompt.shape[1]
        pos = torch.arange(P)[None]
        lg = ours.logits(ours.forward(prompt, pos, pos, kv, length=P))
        for t in range(P):
            rows[t] = lg[0, t]
        for _ in range(20):                                 # greedy, one token at a time
            nxt = int(rows[len(seq) - 1].argmax())
            seq.append(nxt)
            p = torch.tensor([[len(seq) - 1]])
            rows[len(seq) - 1] = ours.logits(ours.forward(torch.tensor([[nxt]]), p, p, kv, length=len(seq)))[0, 0]
        # a multi-token verify chunk of 4 (arbitrary tokens) after the greedy run
        chunk = torch.randint(0, 97, (1, 4))
        p = torch.arange(len(seq), len(seq) + 4)[None]
        lg = ours.logits(ours.forward(chunk, p, p, kv, length=len(seq) + 4))
        seq += chunk[0].tolist()
        for i in range(4):
            rows[len(seq) - 4 + i] = lg[0, i]
    ref = hf_logits(hf, torch.tensor([seq]))[0]
    got = torch.stack([rows[t] for t in range(len(seq))])
    assert torch.allclose(got, ref, atol=1e-5, rtol=1e-5), (got - ref).abs().max()
    # greedy agreement: each greedy token is HF's argmax at the previous position
    greedy = seq[7:27]
    assert ref[6:26].argmax(-1).tolist() == greedy
