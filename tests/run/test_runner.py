"""The Runner: config -> runtime -> proposer -> waves (CPU)."""
import pytest

from atlas_ab import AtlasError
from atlas_ab.config.structured import ArmConfig, ModelConfig, RunnerConfig, WorkloadConfig

TINY_WL = WorkloadConfig(n_docs=3, turns=2, chunk_tokens=12, gen_tokens=6)


def test_random_preset_runs_a_wave():
    from atlas_ab.run.runner import Runner
    model = ModelConfig(name="gpu", path=None, init="random", hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, intermediate_size=96, vocab_size=4096)
    r = Runner(ArmConfig(name="refeed_on", catchup=True, refeed=True), model, TINY_WL,
               RunnerConfig(device="cpu", batch_width=2))
    assert r.waves == [[0, 1], [2]] and r.info.model["hash"].startswith("random:")
    res = r.run_wave(1)
    assert res.gate["passed"] and res.steps.num_rows > 0 and res.events is not None


def test_checkpoint_init_needs_a_path():
    from atlas_ab.run.runner import Runner
    with pytest.raises(AtlasError, match="model.path is required"):
        Runner(ArmConfig(), ModelConfig(path=None), TINY_WL, RunnerConfig(device="cpu"))


def test_no_cuda_here_is_one_line():
    import torch

    from atlas_ab.run.runner import resolve_device
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(AtlasError, match="no CUDA device"):
        resolve_device("cuda")
