"""FP8 E4M3 for the drafter: its head's weights and activations, and its KV rows.

Terms: E4M3 = `torch.float8_e4m3fn` (largest finite 448, no infinities); a tensor is stored as
q = round_e4m3(clamp(x / s, -448, 448)) with a scale s, and read back as q x s.

Scales (the reference engine's `quantize_to_fp8` is not in the seeds, so these rules are ours):
- the head's weights [V, H]: one scale per vocabulary row, s_v = amax_h |W[v, h]| / 448 (a row of
  zeros: s_v = 1);
- the head's activation [R, H]: one scale per call, s = amax |x| / 448, taken over each ROW of the
  call: the engine's propose is one sequence per call (`forward_one`), so its per-call scale is a
  per-row one here; one scale over a batch would let a sequence's draft depend on its neighbours;
- the drafter's KV rows (`KvCacheDtype::Fp8`, no scale in its config): scale 1, a saturating cast.
The clamp comes before every cast: torch's own out-of-range cast is not the same on every version.

Two ways to the same head logits z = (q_x s_x) (q_W s_W)^T:
- `scaled_mm` (real): `torch._scaled_mm` on a GPU with FP8 tensor cores and row-wise scaling
  (compute capability 9.0+), fp32 accumulation, bf16 logits (row-wise scaling's one output type);
- `emulated` (everywhere else): q_x and q_W decoded to fp32 (exact: every E4M3 value is an fp32
  one) and multiplied in fp32, the scales applied to the product. The same q and s as the real path,
  so the two differ only in the GEMM's accumulation order and the bf16 rounding of the output
  (tests/runtime/test_fp8.py states the bound).
"""
from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0


def to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """x (already divided by its scale) as E4M3, saturating at +-448."""
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., H] -> (q [..., H] E4M3, s [...] fp32): one scale per row, amax / 448 (zero rows: 1)."""
    amax = x.detach().float().abs().amax(dim=-1)
    s = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    return to_e4m3(x.detach().float() / s[..., None]), s


def real_fp8_matmul(device: torch.device) -> bool:
    """Whether `device` runs `torch._scaled_mm` with row-wise scales (CUDA, compute capability 9.0+)."""
    return device.type == "cuda" and hasattr(torch, "_scaled_mm") and torch.cuda.get_device_capability(device) >= (9, 0)


def emulated_linear(x: torch.Tensor, w_q: torch.Tensor, w_s: torch.Tensor) -> torch.Tensor:
    """x [..., H] (any float dtype) times the FP8 weights (w_q [V, H] E4M3, w_s [V]) -> fp32 [..., V],
    x quantised per row as the real path does, the product in fp32."""
    x_q, x_s = quantize_rows(x)
    return (x_q.float() @ w_q.float().t()) * x_s[..., None] * w_s


def scaled_mm_linear(x: torch.Tensor, w_q: torch.Tensor, w_s: torch.Tensor) -> torch.Tensor:
    """`emulated_linear` as one FP8 GEMM (`real_fp8_matmul` devices): bf16 [..., V].

    `torch._scaled_mm`'s signature changed: until torch 2.4 its scales were keyword-only and it
    returned (out, amax); from 2.5 (2.11 and 2.13 included) `(self, mat2, scale_a, scale_b, bias=None,
    scale_result=None, out_dtype=None, use_fast_accum=False) -> Tensor`. Keywords and a tuple check
    take both. Row-wise: scale_a [M, 1], scale_b [1, V] fp32; mat2 column-major (w_q [V, H] row-major,
    transposed); H and V multiples of 16."""
    lead = x.shape[:-1]
    x_q, x_s = quantize_rows(x.reshape(-1, x.shape[-1]))
    out = torch._scaled_mm(x_q, w_q.t(), scale_a=x_s[:, None].contiguous(), scale_b=w_s[None, :].contiguous(),
                           out_dtype=torch.bfloat16)
    if isinstance(out, tuple):        # torch <= 2.4: (out, amax)
        out = out[0]
    return out.reshape(*lead, w_q.shape[0])
