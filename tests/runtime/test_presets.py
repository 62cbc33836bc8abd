"""Model presets: model=llama1b / llama8b (random weights at NOTES.md's shapes, built on the device in
the run's dtype) and model=path (a real checkpoint: layout detected, the unsupported refused in one
line). CPU tests: composition, shapes counted on the meta device, never an 8B model in memory."""
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf
from torch.utils._python_dispatch import TorchDispatchMode

from atlas_ab.config.structured import ARCH_FIELDS, validate_model
from atlas_ab.runtime.model import MTPModule, Transformer
from atlas_ab.runtime.presets import args_of, random_checkpoint

ROOT = Path(__file__).resolve().parents[2]

# NOTES.md, "Real shapes on the H200": trunk d, layers, heads, KV heads, SwiGLU; vocab 4096 (the tokenizer)
SHAPES = {"llama1b": (2048, 16, 16, 8, 5632, 0.77e9), "llama8b": (4096, 32, 32, 8, 11008, 5.7e9)}


def model_cfg(*overrides):
    from tests.helpers.compose import cfg_of
    return OmegaConf.to_object(cfg_of(*overrides).model)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_presets_have_the_notes_shapes(name):
    m = validate_model(model_cfg(f"model={name}"))
    d, L, nh, kvh, ffn, trunk_params = SHAPES[name]
    assert (m.init, m.path, m.name) == ("random", None, name)
    assert (m.hidden_size, m.num_hidden_layers, m.num_attention_heads, m.num_key_value_heads,
            m.intermediate_size, m.vocab_size) == (d, L, nh, kvh, ffn, 4096)
    with torch.device("meta"):                     # counted without allocating a byte
        trunk, mtp = Transformer(args_of(m)), MTPModule(args_of(m))
    n = sum(p.numel() for p in trunk.parameters())
    assert abs(n - trunk_params) / trunk_params < 0.01, n
    assert sum(p.numel() for p in mtp.parameters()) < n / L * 1.3       # one MTP layer ~ one trunk layer


class _Allocations(TorchDispatchMode):
    """Every tensor an op produces: (device type, dtype, numel)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                self.seen.append((t.device.type, t.dtype, t.numel()))
        return out


def test_random_init_never_materialises_off_the_device():
    """The llama8b shape built for the meta device: every tensor of the build is on that device (so
    on a GPU nothing is materialised on the CPU), and it takes no memory here."""
    with _Allocations() as rec:
        ck = random_checkpoint(model_cfg("model=llama8b"), "tok.json", torch.device("meta"), torch.bfloat16)
    assert rec.seen and {dev for dev, _, _ in rec.seen} == {"meta"}
    assert {p.dtype for p in ck.trunk.parameters()} == {torch.bfloat16}
    assert ck.layout.handoff_norm == "pre" and ck.layout.source.startswith("init=random")


def test_random_init_materialises_only_in_the_run_dtype():
    """On a real device, no weight-sized tensor ever exists in fp32 (no fp32 build then a cast:
    at 5.7B that would be 23 GB before the 11.4 GB of bf16)."""
    cfg = SimpleNamespace(vocab_size=4096, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, intermediate_size=688)
    with _Allocations() as rec:
        random_checkpoint(cfg, "t", "cpu", torch.bfloat16)
    real = [(dt, n) for dev, dt, n in rec.seen if dev == "cpu"]
    assert real and all(dt == torch.bfloat16 for dt, n in real if n >= 4096), {dt for dt, _ in real}


def test_random_init_on_cpu_is_seeded_and_in_the_run_dtype():
    cfg = SimpleNamespace(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, intermediate_size=48)
    a = random_checkpoint(cfg, "t", "cpu", torch.bfloat16, seed=3)
    b = random_checkpoint(cfg, "t", "cpu", torch.bfloat16, seed=3)
    c = random_checkpoint(cfg, "t", "cpu", torch.bfloat16, seed=4)
    sa, sb, sc = a.trunk.state_dict(), b.trunk.state_dict(), c.trunk.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa) and not torch.equal(sa["lm_head.weight"], sc["lm_head.weight"])
    assert {p.dtype for p in a.mtp.parameters()} == {torch.bfloat16}
    w = sa["model.layers.0.mlp.up_proj.weight"].float()
    assert 0.015 < w.std() < 0.025 and torch.equal(sa["model.norm.weight"], torch.ones(32, dtype=torch.bfloat16))


def test_model_path_composes_without_architecture():
    m = model_cfg("model=path", "model.path=/some/dir")
    assert m.init == "checkpoint" and m.path == "/some/dir"
    assert all(getattr(m, k) is None for k in ARCH_FIELDS)
    validate_model(m)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "atlas_ab", *args, "runner.progress=false"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)


@pytest.mark.slow        # the CLI end to end; tests/runtime/test_layouts.py checks the refusal in-process
def test_model_path_refuses_an_unsupported_checkpoint_in_one_line(tmp_path):
    from tests.helpers.mtp_reference import deepseek_checkpoint
    d = tmp_path / "dsv3"
    deepseek_checkpoint(d, model_type="deepseek_v3", n_routed_experts=256, kv_lora_rank=512)
    r = _cli("model=path", f"model.path={d}", f"hydra.run.dir={tmp_path / 'run'}")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert "n_routed_experts=256" in lines[0] and "MLA attention" in lines[0]
