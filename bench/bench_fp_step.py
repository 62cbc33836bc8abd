"""FINGERPRINTS in the step: where its cost goes (issue: speed), in one process.

    python bench/bench_fp_step.py [--json OUT]

The fingerprint kernel alone at a step's row counts (replayed from a CUDA graph), and a
profiled refeed wave with FINGERPRINTS on and off: the device's kernel time per step and
the step's median, so the on/off gap splits into device (hashing) and host (events) time.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_runner import _time, docs_for, load_models, profile_wave  # noqa: E402

from atlas_ab.config.structured import ArmConfig  # noqa: E402
from atlas_ab.telemetry.fingerprint import fingerprint_rows  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--model", default="default")
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args(argv)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ck = load_models(a.model, dev, torch.bfloat16 if dev.type == "cuda" else torch.float32)
    trunk, mtp = ck.trunk.eval(), ck.mtp.eval()
    H = trunk.args.hidden_size
    out = {"model": a.model, "hidden": H, "kernel_us": {}, "waves": {}}
    for n in (a.batch * 12, a.batch * 48):          # a step's rows (2 + W + 2(K+1) per sequence)
        x = torch.randn(n, H, device=dev, dtype=torch.bfloat16)
        out["kernel_us"][n] = _time(lambda x=x: fingerprint_rows(x), dev, 200) * 1e3
    docs = docs_for(a.batch, 2, 64, 32)
    for name, fp in (("off", False), ("on", True)):
        arm = ArmConfig(name=f"refeed_fp_{name}", catchup=True, refeed=True, fingerprints=fp)
        out["waves"][name] = w = profile_wave(trunk, mtp, arm, docs, 32, top=8)
        print(f"{name}: step {w['unprofiled_step_ms_median']:.3f} ms, device {w['device_ms_per_step']:.3f} ms/step, "
              f"events table {w['events_table_ms']:.1f} ms/wave; host by stage: "
              + ", ".join(f"{k} {v:.3f}" for k, v in w["host_split_ms_per_step"].items()), file=sys.stderr)
    print(json.dumps(out, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
