"""The whole step captured as one CUDA graph gives the same step rows as the same static-shape
step run eagerly, for every arm of the claims studies (GPU only; bf16)."""
import pandas as pd
import pyarrow as pa
import pytest
import torch
import yaml
from omegaconf import OmegaConf

from atlas_ab.config.paths import CONF_DIR
from atlas_ab.config.structured import ArmConfig, SamplingConfig
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.sampling import plan_of
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.telemetry.fingerprint import fingerprint_rows
from atlas_ab.telemetry.schema import TIMING_COLUMNS
from tests.helpers.tiny import tiny_docs, tiny_models

pytestmark = pytest.mark.gpu
G = 12


def study_arms(study: str) -> list[str]:
    return yaml.safe_load((CONF_DIR / "study" / f"{study}.yaml").read_text())["study"]["arms"]


def arm_config(name: str) -> ArmConfig:
    raw = yaml.safe_load((CONF_DIR / "arm" / f"{name}.yaml").read_text())
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ArmConfig), raw))


TREES = [a for a in study_arms("tree") if arm_config(a).tree is not None]       # tree_top2, tree_linear2
CASES = ([(a, None) for a in study_arms("claims") + study_arms("claims_conf") + TREES]
         + [(a, 1.0) for a in study_arms("claims_sampled") + TREES])     # the trees sampled: tree_sampling.py


@pytest.fixture(scope="module")
def models():
    trunk, mtp = tiny_models()
    return trunk.cuda().to(torch.bfloat16), mtp.cuda().to(torch.bfloat16).attach(trunk)


def wave(models, arm, temperature, capture, run_ahead=True, fuse=True):
    trunk, mtp = models
    plan = plan_of(arm, SamplingConfig(temperature=temperature, seed=5)) if temperature else None
    fp = fingerprint_rows if arm.fingerprints_on else None
    w = Wave(LiveTarget(trunk, graphs=True, capture=capture, fuse=fuse),
             MTPProposer(trunk, mtp, arm.row_space, arm.refeed, head_fp8=arm.head_fp8, kv_fp8=arm.kv_fp8,
                         head_shards=arm.head_shards),
             arm, tiny_docs(n=8, turns=3, chunk=12), G, fingerprint_rows=fp, sampling=plan, run_ahead=run_ahead)
    assert (w.ahead is not None) == (run_ahead and arm.draft_conf <= 0 and arm.tree is None)
    assert w.step.fuse == fuse
    return w.run()


def assert_same_rows(one, two):
    a, b = (t.steps.table().to_pandas().drop(columns=list(TIMING_COLUMNS)) for t in (one, two))
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert one.generated == two.generated
    if one.events is not None:
        ints = {pa.int64(): pd.Int64Dtype()}.get
        pd.testing.assert_frame_equal(one.events.table().to_pandas(types_mapper=ints),
                                      two.events.table().to_pandas(types_mapper=ints), check_exact=True)


@pytest.mark.parametrize("name,temperature", CASES, ids=[f"{a}{'_t1' if t else ''}" for a, t in CASES])
def test_captured_step_equals_the_eager_static_step(models, name, temperature):
    arm = arm_config(name)
    if "draft_conf" in name:                   # make DRAFT_CONF gate some steps on random weights
        arm.draft_conf = min(arm.draft_conf, 0.2)
    eager, captured = (wave(models, arm, temperature, c) for c in (False, True))
    assert_same_rows(eager, captured)


AHEAD = [(a, t) for a, t in CASES if arm_config(a).draft_conf <= 0 and arm_config(a).tree is None]


@pytest.mark.parametrize("name,temperature", AHEAD + [("k3", None), ("k1", 1.0)],
                         ids=[f"{a}{'_t1' if t else ''}" for a, t in AHEAD + [("k3", None), ("k1", 1.0)]])
def test_captured_run_ahead_equals_the_captured_step_by_step_loop(models, name, temperature):
    """The device plans its own steps and runs a turn's chunk of them back to back: the same rows
    (and texts, and fingerprint events) as steps that each wait for the host's plan."""
    arm = arm_config(name)
    assert_same_rows(wave(models, arm, temperature, True, run_ahead=False), wave(models, arm, temperature, True))


@pytest.mark.parametrize("name,temperature", CASES + [("k3", None)],
                         ids=[f"{a}{'_t1' if t else ''}" for a, t in CASES + [("k3", None)]])
def test_fused_bookkeeping_equals_the_eager_ops(models, name, temperature):
    """The step's bookkeeping compiled by torch.compile (runtime/fusion.py, the GPU default) gives the
    rows (and texts and fingerprint events) of the same ops run eagerly, captured both."""
    arm = arm_config(name)
    if "draft_conf" in name:
        arm.draft_conf = min(arm.draft_conf, 0.2)
    assert_same_rows(wave(models, arm, temperature, True, fuse=False), wave(models, arm, temperature, True))


@pytest.mark.parametrize("name,temperature", [("refeed_on", None), ("refeed_on", 1.0), ("draft_conf_066", None),
                                              ("tree_top2", None), ("tree_top2", 1.0)],
                         ids=["refeed_on", "refeed_on_t1", "draft_conf_066", "tree_top2", "tree_top2_t1"])
def test_a_waves_graphs_serve_the_next_wave(models, name, temperature):
    """The run's target keeps its graphs: a second wave of the same shape replays the first wave's
    graphs (the same objects) and gives exactly the rows it gives on fresh objects (other
    documents, so other doc keys under sampling: the doc buffer is read by address)."""
    trunk, mtp = models
    arm = arm_config(name)
    if "draft_conf" in name:
        arm.draft_conf = 0.2
    plan = plan_of(arm, SamplingConfig(temperature=temperature, seed=5)) if temperature else None
    fp = fingerprint_rows if arm.fingerprints_on else None
    first = tiny_docs(n=8, turns=3, chunk=12, seed=1)
    second = [d.__class__(doc_id=d.doc_id + 100, name=d.name, chunks=d.chunks) for d in tiny_docs(n=8, turns=3,
                                                                                                chunk=12, seed=2)]

    def run(target, prop, docs):
        t = Wave(target, prop, arm, docs, G, fingerprint_rows=fp, sampling=plan, capacity=120).run()
        return t.steps.table().to_pandas().drop(columns=list(TIMING_COLUMNS))

    target, prop = LiveTarget(trunk, graphs=True), MTPProposer(trunk, mtp, arm.row_space, arm.refeed)
    run(target, prop, first)
    kept = dict(target.step_graphs._graphs)
    again = run(target, prop, second)
    assert kept and all(target.step_graphs._graphs.get(k) is g for k, g in kept.items()), "the graphs were dropped"
    fresh = run(LiveTarget(trunk, graphs=True), MTPProposer(trunk, mtp, arm.row_space, arm.refeed), second)
    pd.testing.assert_frame_equal(again, fresh, check_exact=True)


def test_a_halted_run_ahead_gives_the_step_by_step_rows(models):
    """A catch-up wider than the run-ahead's width (forced to 1 here) halts the captured chunk;
    the host steps once and the next chunk starts from there."""
    trunk, mtp = models
    arm = arm_config("refeed_on")
    waves = [Wave(LiveTarget(trunk, graphs=True), MTPProposer(trunk, mtp, arm.row_space, arm.refeed), arm,
                  tiny_docs(n=8, turns=3, chunk=12), G, fingerprint_rows=fingerprint_rows, run_ahead=r)
             for r in (False, True)]
    for w in waves:
        w.cu_width = 1                  # the same shapes in both loops: one catch-up row, else the bucket
        if w.ahead is not None:
            w.ahead.cu_width = 1
    assert [w.ahead is not None for w in waves] == [False, True]
    assert_same_rows(*(w.run() for w in waves))
