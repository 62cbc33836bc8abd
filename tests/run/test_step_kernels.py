"""The kernels of the captured step, counted (GPU only): the kernel nodes of every CUDA graph a wave
captures, for arms with FINGERPRINTS off (the no-op step probe) and on (its recorder hashing in the
step), against tests/run/step_kernels.json. A change that moves work onto the no-op path, or adds
a launch to the hashing, changes a count here.

The counts depend on torch, Triton and the GPU: record them on the commit that is the reference
(the same test file on it), then compare on the change:

    ATLAS_RECORD_STEP_KERNELS=1 python -m pytest -m gpu tests/run/test_step_kernels.py   # reference
    python -m pytest -m gpu tests/run/test_step_kernels.py                               # the change

Graphs are counted from their cudaGraph_t (CUDAGraph(keep_graph=True), the runtime's
cudaGraphGetNodes / cudaGraphNodeGetType): nothing is replayed for it."""
import ctypes
import functools
import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from atlas_ab.config.paths import CONF_DIR
from atlas_ab.config.structured import ArmConfig
from atlas_ab.proposers.mtp_head import MTPProposer
from atlas_ab.speculative.loop import Wave
from atlas_ab.speculative.targets import LiveTarget
from atlas_ab.telemetry.fingerprint import fingerprint_rows
from tests.helpers.tiny import tiny_docs, tiny_models

pytestmark = pytest.mark.gpu
GOLDEN = Path(__file__).with_name("step_kernels.json")
RECORD = os.environ.get("ATLAS_RECORD_STEP_KERNELS") == "1"
G = 12
KERNEL_NODE = 0          # cudaGraphNodeTypeKernel

#: (case, arm, overrides, run ahead): each arm with FINGERPRINTS off and on, run ahead and step by step
CASES = [(f"{arm}_fp{int(fp)}_{'ahead' if ahead else 'steps'}", arm, {**over, "fingerprints": fp}, ahead)
         for arm, over, aheads in (("baseline", {}, (True, False)), ("refeed_on", {}, (True, False)),
                                   ("k3", {}, (True,)), ("tree_top2", {}, (False,)),
                                   ("draft_conf_066", {"draft_conf": 0.2}, (False,)))
         for fp in (False, True) for ahead in aheads]


def arm_config(name: str, over: dict) -> ArmConfig:
    raw = yaml.safe_load((CONF_DIR / "arm" / f"{name}.yaml").read_text())
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ArmConfig), raw, over))


def cudart() -> ctypes.CDLL:
    """The CUDA runtime torch loaded (its soname differs by CUDA version)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "libcudart.so" in line:
            return ctypes.CDLL(line.split()[-1])
    return ctypes.CDLL("libcudart.so")


def kernel_nodes(graph: torch.cuda.CUDAGraph) -> int:
    rt, handle = cudart(), ctypes.c_void_p(int(graph.raw_cuda_graph()))     # an int, or a cuda-python handle
    n = ctypes.c_size_t(0)
    assert rt.cudaGraphGetNodes(handle, None, ctypes.byref(n)) == 0
    nodes = (ctypes.c_void_p * n.value)()
    assert rt.cudaGraphGetNodes(handle, nodes, ctypes.byref(n)) == 0
    kinds = [ctypes.c_int(-1) for _ in range(n.value)]
    for node, kind in zip(nodes, kinds):
        assert rt.cudaGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind)) == 0
    return sum(k.value == KERNEL_NODE for k in kinds)


@pytest.fixture(scope="module")
def models():
    trunk, mtp = tiny_models()
    return trunk.cuda().to(torch.bfloat16), mtp.cuda().to(torch.bfloat16).attach(trunk)


@pytest.fixture(scope="module")
def counts(models):
    """case -> {graph kind: sorted kernel counts of the wave's graphs of that kind}."""
    real = torch.cuda.CUDAGraph
    torch.cuda.CUDAGraph = functools.partial(real, keep_graph=True)     # the graph kept after capture, to count
    try:
        out = {}
        trunk, mtp = models
        for case, name, over, ahead in CASES:
            arm = arm_config(name, over)
            target = LiveTarget(trunk, graphs=True)
            Wave(target, MTPProposer(trunk, mtp, arm.row_space, arm.refeed), arm, tiny_docs(n=8, turns=3, chunk=12),
                 G, fingerprint_rows=fingerprint_rows if arm.fingerprints_on else None, run_ahead=ahead).run()
            kinds: dict = {}
            for key, step in target.step_graphs._graphs.items():
                kind = key[0] if key[0] != "verify" else f"verify_serial{int(key[1])}"
                kinds.setdefault(kind, []).append(kernel_nodes(step.graph))
            out[case] = {k: sorted(v) for k, v in sorted(kinds.items())}
        return out
    finally:
        torch.cuda.CUDAGraph = real


def test_fingerprints_add_no_graph(counts):
    """The probe adds kernels inside the step's graphs, never a graph: the same graphs, kind by
    kind, with FINGERPRINTS off and on."""
    for case, *_ in CASES:
        if "_fp0_" in case:
            on = counts[case.replace("_fp0_", "_fp1_")]
            assert {k: len(v) for k, v in counts[case].items()} == {k: len(v) for k, v in on.items()}, case


def test_the_captured_steps_kernels_are_the_references(counts):
    if RECORD:
        GOLDEN.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                      "counts": counts}, indent=1, sort_keys=True) + "\n")
    assert GOLDEN.exists(), (f"no reference counts: record them on the reference commit (ATLAS_RECORD_STEP_KERNELS=1); "
                             f"these are this commit's: {json.dumps(counts, sort_keys=True)}")
    ref = json.loads(GOLDEN.read_text())
    assert (ref["device"], ref["torch"]) == (torch.cuda.get_device_name(), torch.__version__), \
        "the reference was recorded on another GPU or torch: record it again on the reference commit"
    assert counts == ref["counts"]
