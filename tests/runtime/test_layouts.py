"""MTP layouts (runtime/layouts.py): tiny DeepSeek-V3, MiMo and declared-key-map checkpoints written
to disk load and draft exactly as an independent reference of each layout's definition
(tests/helpers/mtp_reference.py) says; a wrong order or a wrong norm is caught; unsupported trunks are
refused in one line naming the config field; the loop, its levers and the gate run on MiMo."""
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

from atlas_ab import AtlasError
from atlas_ab.proposers.base import RowFeed
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.runtime import checkpoint
from tests.helpers.mtp_reference import (
    DEEPSEEK,
    MIMO,
    RefLayout,
    base_config,
    deepseek_checkpoint,
    llama_tensors,
    mimo_checkpoint,
    mtp_tensors,
    reference_drafts,
    write_checkpoint,
)

pytestmark = pytest.mark.float_sensitive

K = 3
PROMPTS = [[5, 17, 3, 44, 9, 28, 11, 2, 60, 31, 7, 19, 23, 40],
           [1, 0, 55, 12, 33, 8, 47, 21, 30, 6, 58, 14, 36, 27],
           [22, 9, 9, 9, 50, 13, 2, 41, 17, 38, 4, 26, 52, 18]]

# A Llama checkpoint whose MTP layer uses names of its own, declared in atlas_mtp.yaml.
DECLARED_YAML = """\
prefix: "mtp."
block: "layers.0."
embed_norm: pre_fc_norm_embedding
hidden_norm: pre_fc_norm_hidden
proj: fc
final_norm: norm
concat: [embed, hidden]
zero_first_embed: false
handoff_norm: pre
recycle_norm: post
"""
DECLARED = RefLayout("mtp.", "pre_fc_norm_embedding", "pre_fc_norm_hidden", "fc", "norm",
                     hidden_first=False, zero_first=False, block="layers.0.")


def declared_checkpoint(d, seed=0):
    cfg = base_config("llama")
    t, w, norm = llama_tensors(cfg, seed)
    t.update(mtp_tensors(DECLARED, cfg, w, norm, qkv_bias=False))
    write_checkpoint(d, cfg, t)
    (d / "atlas_mtp.yaml").write_text(DECLARED_YAML)
    return cfg, t


BUILD = {"deepseek_v3": (deepseek_checkpoint, lambda cfg: DEEPSEEK(cfg["num_hidden_layers"])),
         "mimo": (mimo_checkpoint, lambda cfg: MIMO),
         "declared": (declared_checkpoint, lambda cfg: DECLARED)}


@torch.no_grad()
def our_drafts(ck, prompts, K, handoff=None, recycle=None):
    """Drafts and top-1 probs of our drafter: context rows over each prompt, then one propose."""
    lay = ck.layout
    prop = MTPProposer(ck.trunk, ck.mtp, "compact", refeed=False, handoff_norm=handoff or lay.handoff_norm,
                       recycle_norm=recycle or lay.recycle_norm)
    B, T = len(prompts), len(prompts[0])
    toks = torch.tensor(prompts)
    prop.alloc(np.full(B, T + K + 4))
    h = ck.trunk.forward_train(toks)                                       # [B, T, H] pre-norm
    nxt = ck.trunk.logits(h[:, -1:])[:, 0].argmax(-1)
    seq, key = np.repeat(np.arange(B), T - 1), np.tile(np.arange(T - 1), B)
    prop.prefill_drafter(RowFeed(seq=seq, key=key, token=toks[:, 1:].numpy().reshape(-1),
                                 label=np.full(len(seq), -1), hiddens=h[:, :T - 1].reshape(-1, h.shape[-1])))
    p = prop.propose(None, nxt, h[:, -1], np.full(B, T), K, np.ones(B, dtype=bool))
    return p.drafts.tolist(), p.conf.tolist()


def compare(ck, t, cfg, lay, ref_handoff, ref_recycle, **ours):
    """Largest top-1 prob gap between our drafter and the reference (inf if a draft differs)."""
    got_d, got_c = our_drafts(ck, PROMPTS, K, **ours)
    gap = 0.0
    for b, prompt in enumerate(PROMPTS):
        ref_d, ref_c = reference_drafts(t, cfg, lay, prompt, K, ref_handoff, ref_recycle)
        if ref_d != got_d[b]:
            return float("inf")
        gap = max(gap, max(abs(x - y) for x, y in zip(ref_c, got_c[b])))
    return gap


@pytest.mark.parametrize("name", sorted(BUILD))
def test_layout_drafts_as_its_definition(tmp_path, name):
    build, ref_layout = BUILD[name]
    cfg, t = build(tmp_path / name)
    ck = checkpoint.load(tmp_path / name, "cpu", torch.float32)
    lay = ck.layout
    assert lay.name == name
    if name == "mimo":        # read from vLLM's mimo.py / mimo_mtp.py (see runtime/layouts.py)
        assert (lay.handoff_norm, lay.recycle_norm, lay.hidden_first) == ("pre", "post", True)
        assert ck.args.attention_bias and not ck.args.o_bias
    if name == "deepseek_v3":
        assert (lay.handoff_norm, lay.recycle_norm, lay.hidden_first) == ("post", "post", False)
        assert ck.mtp.shared_head.head is not None         # its own head, read from the file
    if name == "declared":
        assert lay.source == "atlas_mtp.yaml" and lay.block == "layers.0."
    gap = compare(ck, t, cfg, ref_layout(cfg), lay.handoff_norm, lay.recycle_norm)
    assert gap < 1e-5, gap


def _with_key_map(tmp_path, build, **decl):
    d = tmp_path / "ck"
    cfg, t = build(d)
    c = json.loads((d / "config.json").read_text())
    c["atlas_mtp"] = decl
    (d / "config.json").write_text(json.dumps(c))
    return checkpoint.load(d, "cpu", torch.float32), cfg, t


@pytest.mark.parametrize("wrong", [dict(concat=["embed", "hidden"]),
                                   dict(embed_norm="hidden_layernorm", hidden_norm="token_layernorm"),
                                   dict(zero_first_embed=False)],
                         ids=["concat order swapped", "input norms swapped", "no zeroed first embedding"])
def test_a_wrong_mimo_wiring_is_caught(tmp_path, wrong):
    """The reference comparison has teeth: MiMo loaded with one thing wired wrong drafts otherwise."""
    ck, cfg, t = _with_key_map(tmp_path, mimo_checkpoint, layout="mimo", **wrong)
    assert ck.layout.name == "mimo+declared"
    assert compare(ck, t, cfg, MIMO, "pre", "post") > 1e-3


@pytest.mark.parametrize("handoff,recycle", [("post", "post"), ("pre", "pre")])
def test_a_wrong_handoff_is_caught(tmp_path, handoff, recycle):
    cfg, t = mimo_checkpoint(tmp_path / "m", norm_spread=0.8)
    ck = checkpoint.load(tmp_path / "m", "cpu", torch.float32)
    assert compare(ck, t, cfg, MIMO, "pre", "post") < 1e-5
    assert compare(ck, t, cfg, MIMO, "pre", "post", handoff=handoff, recycle=recycle) > 1e-3


def test_deepseek_embedding_copy_must_be_the_trunks(tmp_path):
    d = tmp_path / "ds"
    cfg, t = deepseek_checkpoint(d)
    t["model.layers.2.embed_tokens.weight"] = t["model.embed_tokens.weight"] + 1
    write_checkpoint(d, cfg, t)
    with pytest.raises(AtlasError, match="model.layers.2.embed_tokens.weight differs"):
        checkpoint.load(d, "cpu", torch.float32)
    deepseek_checkpoint(d, own_head=False, embed_copy=False)     # both optional
    ck = checkpoint.load(d, "cpu", torch.float32)
    assert ck.mtp.shared_head.head is None and ck.layout.name == "deepseek_v3"


def test_save_writes_the_key_map_it_was_built_with(tmp_path):
    from atlas_ab.runtime.layouts import TRAINED_HERE
    from tests.helpers.tiny import tiny_models
    trunk, mtp = tiny_models()
    checkpoint.save(tmp_path, trunk.args, trunk, mtp)
    decl = json.loads((tmp_path / "config.json").read_text())["atlas_mtp"]
    assert decl == {"layout": "deepseek_v3", "handoff_norm": "pre", "recycle_norm": "pre", "zero_first_embed": False}
    ck = checkpoint.load(tmp_path, "cpu", torch.float32)
    assert ck.layout == TRAINED_HERE
    with pytest.raises(ValueError, match="not wired"):
        from atlas_ab.runtime.layouts import MIMO as OURS_MIMO
        checkpoint.save(tmp_path / "x", trunk.args, trunk, mtp, layout=OURS_MIMO)


# ---- detection and refusal: one line, naming the field ---------------------------------------------
def _refused(tmp_path, **cfg_extra):
    d = tmp_path / "r"
    deepseek_checkpoint(d, **cfg_extra)
    with pytest.raises(AtlasError) as e:
        checkpoint.load(d, "cpu", torch.float32)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("extra,words", [
    (dict(model_type="deepseek_v3", n_routed_experts=256, kv_lora_rank=512),
     ["MoE trunk", "n_routed_experts=256", "MLA attention", "kv_lora_rank=512", "'deepseek_v3'"]),
    (dict(model_type="qwen3_moe", num_experts=128), ["MoE trunk", "num_experts=128"]),
    (dict(model_type="qwen3_next", layer_types=["linear_attention", "full_attention"]),
     ["linear-attention hybrid", "layer_types has 'linear_attention'"]),
    (dict(model_type="qwen3_5", linear_num_value_heads=32), ["linear-attention hybrid", "linear_num_value_heads=32"]),
], ids=["deepseek_v3", "qwen3_moe", "qwen3_next", "qwen3_5"])
def test_unsupported_trunks_are_refused_naming_the_field(tmp_path, extra, words):
    msg = _refused(tmp_path, **extra)
    for w in words:
        assert w in msg, msg


def test_an_unknown_mtp_layer_asks_for_a_key_map(tmp_path):
    d = tmp_path / "u"
    cfg, t = declared_checkpoint(d)
    (d / "atlas_mtp.yaml").unlink()
    with pytest.raises(AtlasError, match="no MTP layer of a known layout.*atlas_mtp"):
        checkpoint.load(d, "cpu", torch.float32)


@pytest.mark.parametrize("decl,words", [
    ({"layout": "mimo", "handoff_norm": "after"}, ["handoff_norm='after'", "'pre' or 'post'"]),
    ({"layout": "glm"}, ["layout='glm'", "deepseek_v3, mimo"]),
    ({"layout": "mimo", "recycle": "post"}, ["unknown MTP key map field 'recycle'"]),
    ({"prefix": "model.mtp_layers.0."}, ["needs 'embed_norm'"]),
    ({"layout": "mimo", "concat": ["hidden", "token"]}, ["concat"]),
    ({"layout": "mimo", "embed_norm": "hidden_layernorm"}, ["two roles the same tensor name"]),
    ({"layout": "mimo", "prefix": "model.layers.0."}, ["points at the trunk's tensor"]),
])
def test_bad_key_maps_are_one_line(tmp_path, decl, words):
    with pytest.raises(AtlasError) as e:
        _with_key_map(tmp_path, mimo_checkpoint, **decl)
    for w in words:
        assert w in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_key_map_declared_twice_is_refused(tmp_path):
    d = tmp_path / "m"
    mimo_checkpoint(d)
    (d / "atlas_mtp.yaml").write_text("layout: mimo\n")
    ck = checkpoint.load(d, "cpu", torch.float32)                 # the YAML alone is fine ...
    c = json.loads((d / "config.json").read_text())
    c["atlas_mtp"] = {"layout": "mimo"}
    (d / "config.json").write_text(json.dumps(c))
    with pytest.raises(AtlasError, match="declared twice"):      # ... both are ambiguous
        checkpoint.load(d, "cpu", torch.float32)
    assert ck.layout.name == "mimo"


def test_the_yaml_key_map_is_hashed(tmp_path):
    d = tmp_path / "k"
    declared_checkpoint(d)
    h1 = checkpoint.load(d, "cpu", torch.float32).hash
    (d / "atlas_mtp.yaml").write_text(DECLARED_YAML.replace("recycle_norm: post", "recycle_norm: pre"))
    ck = checkpoint.load(d, "cpu", torch.float32)
    assert ck.hash != h1 and ck.layout.recycle_norm == "pre"


# ---- the loop, its levers and the gate on a MiMo checkpoint ------------------------------------------
@pytest.mark.parametrize("arm", [dict(name="refeed", catchup=True, refeed=True),
                                 dict(name="probes", oracle_p2=True, shadow_topk=3, drafter_prefill=True),
                                 dict(name="dense_post", row_space="dense", catchup=True, refeed=True,
                                      num_drafts=3, handoff_norm="post")])
def test_a_mimo_wave_runs_the_levers_losslessly(tmp_path, arm):
    from atlas_ab.analysis.fingerprints import fingerprint_table
    from atlas_ab.config.structured import ArmConfig, validate_arm
    from atlas_ab.runtime.layouts import handoff_in_effect
    from atlas_ab.speculative.loop import Wave
    from atlas_ab.speculative.lossless_gate import check
    from atlas_ab.speculative.targets import LiveTarget
    from atlas_ab.telemetry.fingerprint import fingerprint_rows
    from tests.helpers.tiny import tiny_docs

    mimo_checkpoint(tmp_path / "m", vocab_size=48, drafts_well=True)
    ck = checkpoint.load(tmp_path / "m", "cpu", torch.float32)
    a = validate_arm(ArmConfig(**arm))
    docs = tiny_docs(n=3, turns=2, chunk=10)
    prop = MTPProposer(ck.trunk, ck.mtp, a.row_space, a.refeed,
                       **handoff_in_effect(ck.layout, a.handoff_norm, a.recycle_norm)["in_effect"])
    trace = Wave(LiveTarget(ck.trunk), prop, a, docs, 8, fingerprint_rows=fingerprint_rows).run()
    gate = check(ck.trunk, docs, trace.generated, 8, [0, 1, 2])
    assert gate.passed and gate.divergences == 0 and gate.checked_tokens == 3 * 2 * 8
    steps = trace.steps.table().to_pandas()
    assert (steps.accept_len <= steps.k).all() and steps.accept_len.max() >= 1
    if a.oracle_p2:
        assert steps.oracle_hit2.notna().any()
    if trace.events is not None:
        ev = trace.events.table().to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
        t = fingerprint_table(ev, a.row_space)
        assert all(r.ok for r in t.rows), t.summary()
