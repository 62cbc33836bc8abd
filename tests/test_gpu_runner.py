"""The runner on the GPU (bf16, CUDA graphs); skipped without CUDA."""
import pytest
import torch

from atlas_ab.config import ArmConfig
from atlas_ab.gate import check
from atlas_ab.loop import Wave
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.telemetry.fingerprint import fingerprint_rows
from tiny import tiny_docs, tiny_models

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
    prop = MTPProposer(trunk, mtp, arm.row_space, arm.refeed, graphs=graphs)
    fp = fingerprint_rows if arm.fingerprints_on else None
    trace = Wave(trunk, prop, arm, docs, G, fingerprint_rows=fp, graphs=graphs).run()
    gate = check(trunk, docs, trace.generated, G, list(range(8)))
    assert gate.passed, gate.first_divergence
    steps = trace.steps.table().to_pandas()
    assert (steps.accept_len <= steps.k).all() and steps.accept_len.max() >= 1
    if trace.events is not None:
        from atlas_ab.analysis.fingerprints import fingerprint_table
        import pandas as pd
        import pyarrow as pa
        ev = trace.events.table().to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)
        t = fingerprint_table(ev, "compact")
        assert all(r.ok for r in t.rows), t.summary()


@pytest.mark.parametrize("graphs", [False, True])
def test_gpu_draft_model_is_lossless_up_to_near_ties(models, graphs):
    from atlas_ab.proposers.draft_model import DraftModelProposer
    from tiny import tiny_draft
    trunk, _ = models
    draft = tiny_draft(trunk).cuda().to(torch.bfloat16)   # built on the CPU from the GPU weights
    docs = tiny_docs(n=8, turns=2, chunk=12)
    arm = ArmConfig(proposer="draft_model", num_drafts=3)
    trace = Wave(trunk, DraftModelProposer(draft, graphs=graphs), arm, docs, G, graphs=graphs).run()
    gate = check(trunk, docs, trace.generated, G, list(range(8)))
    assert gate.passed, gate.first_divergence
    assert trace.steps.table().to_pandas().accept_len.max() >= 1
