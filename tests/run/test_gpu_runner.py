"""The runner on the GPU (bf16, CUDA graphs); skipped without CUDA."""
import pytest
import torch

from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.lossless_gate import check
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.telemetry.fingerprint import fingerprint_rows
from tests.helpers.tiny import tiny_docs, tiny_models

pytestmark = pytest.mark.gpu
G = 12


@pytest.fixture(scope="module")
def models():
    trunk, mtp = tiny_models()
    return trunk.cuda().to(torch.bfloat16), mtp.cuda().to(torch.bfloat16).attach(trunk)


@pytest.mark.parametrize("graphs", [False, True])
@pytest.mark.parametrize("arm", [ArmConfig(num_drafts=2),
                                 ArmConfig(catchup=True, refeed=True, oracle_p2=True, shadow_topk=4)],
                         ids=["baseline", "refeed_all_probes"])
def test_gpu_wave_is_lossless_up_to_near_ties(models, arm, graphs):
    trunk, mtp = models
    docs = tiny_docs(n=8, turns=2, chunk=12)
    prop = MTPProposer(trunk, mtp, arm.row_space, arm.refeed)
    fp = fingerprint_rows if arm.fingerprints_on else None
    trace = Wave(LiveTarget(trunk, graphs), prop, arm, docs, G, fingerprint_rows=fp).run()
    gate = check(trunk, docs, trace.generated, G, list(range(8)))
    assert gate.passed, gate.first_divergence
    steps = trace.steps.table().to_pandas()
    assert (steps.accept_len <= steps.k).all() and steps.accept_len.max() >= 1
    if trace.events is not None:
        import pandas as pd
        import pyarrow as pa

        from atlas_ab.analysis.fingerprints import fingerprint_table
        ev = trace.events.table().to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
        t = fingerprint_table(ev, "compact")
        assert all(r.ok for r in t.rows), t.summary()


@pytest.mark.parametrize("graphs", [False, True])
def test_gpu_draft_model_is_lossless_up_to_near_ties(models, graphs):
    from atlas_ab.proposers.draft_model import DraftModelProposer
    from tests.helpers.tiny import tiny_draft
    trunk, _ = models
    draft = tiny_draft(trunk).cuda().to(torch.bfloat16)   # built on the CPU from the GPU weights
    docs = tiny_docs(n=8, turns=2, chunk=12)
    arm = ArmConfig(proposer="draft_model", num_drafts=3)
    trace = Wave(LiveTarget(trunk, graphs), DraftModelProposer(draft), arm, docs, G).run()
    gate = check(trunk, docs, trace.generated, G, list(range(8)))
    assert gate.passed, gate.first_divergence
    assert trace.steps.table().to_pandas().accept_len.max() >= 1


@pytest.mark.parametrize("family", ["ngram", "suffix"])
@pytest.mark.parametrize("graphs", [False, True])
def test_gpu_weightless_families_are_lossless_up_to_near_ties(models, graphs, family):
    """n-gram and suffix decoding on the GPU, eager and captured (their drafts ride the plan), bf16."""
    from tests.helpers.replay_tools import WEIGHTLESS, proposer
    trunk, _ = models
    docs = tiny_docs(n=8, turns=2, chunk=12)
    arm = ArmConfig(proposer=family, num_drafts=3, **WEIGHTLESS[family])
    trace = Wave(LiveTarget(trunk, graphs), proposer(models, arm), arm, docs, G).run()
    gate = check(trunk, docs, trace.generated, G, list(range(8)))
    assert gate.passed, gate.first_divergence
    steps = trace.steps.table().to_pandas()
    assert (steps.accept_len <= steps.k).all() and (steps.k <= 3).all()


@pytest.mark.parametrize("arm", [ArmConfig(num_drafts=2),
                                 ArmConfig(catchup=True, refeed=True, ring_prefill=True, oracle_p2=True,
                                           shadow_topk=4)], ids=["baseline", "refeed_ring_prefill_probes"])
@pytest.mark.parametrize("replay_graphs", [False, True], ids=["replay_eager", "replay_graphed"])
def test_gpu_replay_commits_the_stored_text_and_is_measured_against_live(models, arm, replay_graphs):
    """Replay on the GPU: the build from CUDA graphs, the drafter eager or captured, bf16."""
    from atlas_ab.speculative.replay_check import compare_live, replay_gate
    from atlas_ab.speculative.targets import ReplayTarget
    from atlas_ab.speculative.trajectory import EXTEND, greedy
    trunk, mtp = models
    docs = tiny_docs(n=8, turns=2, chunk=12)
    traj = greedy(trunk, docs, G, extend=EXTEND, keep_hiddens=True)
    assert traj.hiddens.dtype == torch.bfloat16 and traj.hiddens.is_cuda
    fp = fingerprint_rows if arm.fingerprints_on else None
    waves = {}
    for mode in ("live", "replay"):
        target = LiveTarget(trunk, True) if mode == "live" else ReplayTarget(traj, "cuda", graphs=replay_graphs)
        prop = MTPProposer(trunk, mtp, arm.row_space, arm.refeed)
        waves[mode] = Wave(target, prop, arm, docs, G, fingerprint_rows=fp).run()
    rep = waves["replay"]
    assert replay_gate(traj, rep.generated)["passed"]
    steps = rep.steps.table().to_pandas()
    assert steps.step_ms.isna().all() and steps.accept_len.max() >= 1
    c = compare_live(traj, rep.steps.table(), waves["live"].steps.table(), waves["live"].generated)
    # bf16: live may leave the stored text at a near-tie; rows of unchanged context mostly agree
    assert c["rows_matched"] > 0 and c["rows_differ_same_context"] <= 0.1 * c["rows_matched_same_context"]


@pytest.mark.parametrize("arm", [ArmConfig(num_drafts=2),
                                 ArmConfig(catchup=True, refeed=True, ring_prefill=True, oracle_p2=True,
                                           shadow_topk=4),
                                 ArmConfig(catchup=True, refeed=True, refeed_shift=-1, drafter_prefill=True),
                                 ArmConfig(draft_conf=0.5, catchup=True, refeed=True)],
                         ids=["baseline", "refeed_ring_prefill_probes", "shift_m1_prefill", "draft_conf_050"])
def test_gpu_replay_from_cuda_graphs_equals_its_static_steps_run_eagerly(models, arm):
    """A replay's step graphs (the turn read from the device, so one graph serves every turn) give
    the very rows its static-shape steps give launched one kernel at a time: the same kernels on
    the same shapes, so bit for bit, floats included."""
    import pandas as pd

    from atlas_ab.speculative.targets import ReplayTarget
    from atlas_ab.speculative.trajectory import EXTEND, greedy
    from atlas_ab.telemetry.schema import TIMING_COLUMNS
    trunk, mtp = models
    docs = tiny_docs(n=8, turns=3, chunk=12)
    traj = greedy(trunk, docs, G, extend=EXTEND, keep_hiddens=True)
    out = {}
    for capture in (False, True):
        prop = MTPProposer(trunk, mtp, arm.row_space, arm.refeed)
        wave = Wave(ReplayTarget(traj, "cuda", graphs=True, capture=capture), prop, arm, docs, G)
        out[capture] = wave.run().steps.table().to_pandas().drop(columns=list(TIMING_COLUMNS))
        assert bool(wave.graphs._graphs) == capture            # captured only when asked
    pd.testing.assert_frame_equal(out[False], out[True], check_exact=True)
