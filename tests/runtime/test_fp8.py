"""FP8 E4M3 (atlas_ab/runtime/fp8.py): the emulation against an independent computation (CPU), and the
real `torch._scaled_mm` path against the emulation (GPU, skipped without one)."""
import numpy as np
import pytest
import torch

from atlas_ab.runtime.fp8 import E4M3, E4M3_MAX, emulated_linear, quantize_rows, real_fp8_matmul, scaled_mm_linear
from tests.helpers.fp8_ref import e4m3_grid, round_e4m3


def test_grid_is_torchs_e4m3():
    g = e4m3_grid()
    assert len(g) == 127 and g[-1] == 448.0 == E4M3_MAX and g[1] == 2.0 ** -9
    assert torch.equal(torch.tensor(g, dtype=torch.float32).to(E4M3).double(), torch.tensor(g))


def test_quantize_rows_rounds_as_the_independent_rule():
    torch.manual_seed(0)
    w = torch.randn(64, 96) * torch.logspace(-3, 2, 64)[:, None]      # rows over five decades
    w[3] = 0                                                           # a zero row: scale 1
    q, s = quantize_rows(w)
    amax = w.double().abs().amax(-1).numpy()
    s_ref = np.where(amax > 0, (amax / 448).astype(np.float32), 1.0)
    assert np.array_equal(s.numpy(), s_ref.astype(np.float32))
    ref = round_e4m3((w / s[:, None]).double().numpy())             # the scaled values, rounded independently
    assert np.array_equal(q.double().numpy(), ref)
    assert (q.float().abs().amax(-1)[amax > 0] == 448).all()         # each row's amax maps to 448 exactly


def test_emulated_linear_equals_a_straightforward_float64_product():
    """The emulation = (round(x/s_x) s_x) (round(W/s_W) s_W)^T: here in float64 with the independent rounding.
    fp32 accumulation over H = 256 terms of |q| <= 448: the difference is within 1e-5 of the logits' scale."""
    torch.manual_seed(1)
    x, w = torch.randn(8, 256), torch.randn(512, 256) * 0.05
    z = emulated_linear(x, *quantize_rows(w))
    sx = (x.double().abs().amax(-1) / 448).float().double().numpy()
    sw = (w.double().abs().amax(-1) / 448).float().double().numpy()
    xq = round_e4m3(x.double().numpy() / sx[:, None].astype(np.float32)) * sx[:, None]
    wq = round_e4m3(w.double().numpy() / sw[:, None].astype(np.float32)) * sw[:, None]
    ref = xq @ wq.T
    assert z.dtype == torch.float32 and z.shape == (8, 512)
    assert np.abs(z.double().numpy() - ref).max() <= 1e-5 * np.abs(ref).max()
    assert np.array_equal(z.argmax(-1).numpy(), ref.argmax(-1))


def test_emulated_linear_quantises_each_row_alone():
    """A row's logits do not depend on the other rows of the call (a per-row activation scale)."""
    torch.manual_seed(2)
    x, w = torch.randn(6, 64), torch.randn(128, 64)
    x[5] *= 1000
    wq = quantize_rows(w)
    both = emulated_linear(x, *wq)
    for r in range(6):
        assert torch.equal(both[r], emulated_linear(x[r:r + 1], *wq)[0])


def test_cpu_has_no_real_fp8_matmul():
    assert not real_fp8_matmul(torch.device("cpu"))


# GPU: the real FP8 GEMM against the emulation, on the same q and scales.
# Bound: the real path accumulates in fp32 in the GEMM's own order and rounds its output to bf16
# (row-wise scaling's output type): |z_real - z_emu| <= 2^-8 |z| + 1e-3 (a bf16 half-ulp is 2^-9 |z|;
# the rest is the fp32 order over H terms). A draft (argmax) may then differ only where the emulation's
# top-1 and top-2 logits are within twice that bound: such rows are counted, never required equal.
needs_fp8 = pytest.mark.skipif(not torch.cuda.is_available() or not real_fp8_matmul(torch.device("cuda")),
                               reason="needs a CUDA GPU with row-wise FP8 GEMMs (compute capability 9.0+)")


@pytest.mark.gpu
@needs_fp8
@pytest.mark.parametrize("rows,hidden,vocab", [(8, 256, 4096), (64, 1024, 8192)])
def test_scaled_mm_matches_the_emulation_within_its_bound(rows, hidden, vocab):
    torch.manual_seed(3)
    dev = torch.device("cuda")
    x = torch.randn(rows, hidden, device=dev, dtype=torch.bfloat16)
    w = (torch.randn(vocab, hidden, device=dev) * hidden ** -0.5).to(torch.bfloat16)
    wq = quantize_rows(w)
    real, emu = scaled_mm_linear(x, *wq).float(), emulated_linear(x, *wq)
    bound = 2.0 ** -8 * emu.abs() + 1e-3
    assert ((real - emu).abs() <= bound).all(), float((real - emu).abs().max())
    top2 = emu.topk(2, dim=-1).values
    near_tie = (top2[:, 0] - top2[:, 1]) <= 2 * bound.gather(1, emu.argmax(-1, keepdim=True))[:, 0]
    flips = real.argmax(-1) != emu.argmax(-1)
    assert not (flips & ~near_tie).any()
