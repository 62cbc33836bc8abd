"""The shipped checkpoints: they load fast on CPU, transformers reads the same trunk, and they are trained."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from atlas_ab.runtime import checkpoint
from atlas_ab.workload.corpus import build_corpus, file_sha256

MODELS = Path(__file__).resolve().parents[2] / "atlas_ab" / "models"
DEFAULT, DRAFT = MODELS / "default", MODELS / "draft"


@pytest.fixture(scope="module")
def ck():
    return checkpoint.load(DEFAULT, device="cpu", dtype=torch.float32)


@pytest.fixture(scope="module")
def snippet():
    """The first 96 tokens of a held-out stdlib file (the models never trained on it)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(DEFAULT / "tokenizer.json"))
    held = [d for d in build_corpus().select("stdlib", "heldout") if len(d.text) > 4000]
    ids = tok.encode(held[0].text, add_special_tokens=False).ids[:96]
    return torch.tensor([ids])


def test_default_loads_without_random_init(monkeypatch):
    """Loading assigns the file's tensors to modules built on the meta device: no random init
    (what made loads slow), so no torch.nn.init function may touch a real (non-meta) tensor."""
    inits = []
    for name in ("normal_", "uniform_", "kaiming_uniform_", "zeros_", "ones_"):
        real = getattr(torch.nn.init, name)

        def spy(*a, _real=real, _name=name, **k):
            t = a[0] if a else k["tensor"]
            if not t.is_meta:
                inits.append(_name)
            return _real(*a, **k)
        monkeypatch.setattr(torch.nn.init, name, spy)
    c = checkpoint.load(DEFAULT, device="cpu", dtype=torch.float32)
    assert inits == []
    a = c.args
    assert (a.vocab_size, a.hidden_size, a.num_hidden_layers, a.num_attention_heads, a.num_key_value_heads) == \
        (4096, 256, 6, 4, 2)
    assert a.num_nextn_predict_layers == 1 and c.mtp is not None and not a.tie_word_embeddings
    assert c.tokenizer_path and Path(c.tokenizer_path).is_file()
    for f in DEFAULT.iterdir():
        assert f.stat().st_size < 20_000_000, f


def test_draft_loads_small_without_mtp(ck):
    d = checkpoint.load(DRAFT, device="cpu", dtype=torch.float32)
    assert d.mtp is None and d.args.num_nextn_predict_layers == 0
    assert d.args.vocab_size == ck.args.vocab_size
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert n(d.trunk) < 0.3 * n(ck.trunk)
    # one tokenizer for target and draft, shipped once: the draft's is a link to the default's
    assert (DRAFT / "tokenizer.json").is_symlink()
    assert (DRAFT / "tokenizer.json").resolve() == (DEFAULT / "tokenizer.json").resolve()
    assert d.tokenizer_path is not None and file_sha256(d.tokenizer_path) == file_sha256(DEFAULT / "tokenizer.json")


def trained_config_hash(d: Path) -> str:
    """The checkpoint hash as training wrote it: config.json without the "atlas_mtp" key map that
    was declared afterwards (2026-11-30: the MTP wiring and handoff it was trained with, pre/pre),
    serialised as checkpoint.save writes it, + the weights."""
    import hashlib
    cfg = json.loads((d / "config.json").read_text())
    cfg.pop("atlas_mtp", None)
    h = hashlib.sha256((json.dumps(cfg, indent=2) + "\n").encode())
    h.update((d / "model.safetensors").read_bytes())
    return "sha256:" + h.hexdigest()


def test_training_record_matches_artifacts():
    for d in (DEFAULT, DRAFT):
        rec = json.loads((d / "training.json").read_text())
        assert rec["tokenizer_hash"] == file_sha256(d / "tokenizer.json")
        assert rec["checkpoint_hash"] == trained_config_hash(d)



TRAINED_ON = json.loads((DEFAULT / "training.json").read_text())["corpus"]["python_version"]


@pytest.mark.skipif(build_corpus().info.python_version != TRAINED_ON,
                    reason=f"the models were trained on Python {TRAINED_ON}'s stdlib; this interpreter's "
                           "corpus differs by construction (its hash is in every manifest)")
def test_trained_on_this_interpreters_corpus():
    for d in (DEFAULT, DRAFT):
        rec = json.loads((d / "training.json").read_text())
        assert rec["corpus"]["sha256"] == build_corpus().info.sha256


@pytest.mark.slow          # loads transformers (~2.1 s); the outside check of the trunk
def test_transformers_reads_the_same_trunk(ck, snippet):
    transformers = pytest.importorskip("transformers")

    class Quiet(transformers.LlamaForCausalLM):
        _keys_to_ignore_on_load_unexpected = checkpoint.hf_unexpected_patterns(ck.args)

    hf, info = Quiet.from_pretrained(DEFAULT, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]
    with torch.no_grad():
        ours = ck.trunk.logits(ck.trunk.forward_train(snippet))
        theirs = hf.eval()(input_ids=snippet).logits
    assert torch.allclose(ours, theirs, atol=1e-4, rtol=1e-4), (ours - theirs).abs().max()


def test_default_is_trained(ck, snippet):
    """Held-out teacher-forced sanity: far better than chance (ln 4096 = 8.3 nats)."""
    from atlas_ab.train.tf_eval import evaluate
    r = evaluate(ck.trunk, ck.mtp, snippet)
    assert r["main_loss"] < 5.0 and r["mtp_loss"] < 5.5
    assert r["main_acc"] > 0.25 and r["p1_text"] > 0.2


def test_default_declares_the_handoff_it_was_trained_with(ck):
    """Trained on the PRE-norm hidden for draft 1 and its own pre-norm output for later drafts
    (train.py), no zeroed embedding, DeepSeek-V3 names: declared so in config.json, so the drafter
    runs exactly as before the declaration existed."""
    lay = ck.layout
    assert (lay.handoff_norm, lay.recycle_norm, lay.zero_first_embed, lay.concat) == \
        ("pre", "pre", False, ("embed", "hidden"))
    assert lay.source == "config.json" and lay.prefix_for(6) == "model.layers.6."
    assert not ck.mtp.hidden_first and not ck.mtp.zero_first_embed
