from tests.helpers.fakerunner import FakeRunner


def test_fake_runner_is_deterministic():
    from atlas_ab.config.structured import ArmConfig, ModelConfig, RunnerConfig, WorkloadConfig

    wl = WorkloadConfig(n_docs=3, turns=2, gen_tokens=8)
    mk = lambda: FakeRunner(ArmConfig(), ModelConfig(init="random"), wl, RunnerConfig(batch_width=2))
    a, b = mk(), mk()
    assert a.waves == [[0, 1], [2]]
    assert a.run_wave(1).steps.equals(b.run_wave(1).steps)
