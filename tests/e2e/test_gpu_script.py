"""scripts/gpu.sh, the GPU runs as stages of one script: every stage it accepts is defined and
described in its header, a wrong stage is one line on stderr and exit 2 before anything runs, and
the GPU runs stay in that one script (issue 52: at most 4 GPU scripts)."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "scripts" / "gpu.sh"


def _stages() -> list[str]:
    m = re.search(r"^STAGES=\((.*?)\)", GPU.read_text(), re.S | re.M)
    return m.group(1).split()


def test_every_stage_is_defined_and_described():
    text = GPU.read_text()
    header = text[:text.index("\nset -uo pipefail")]
    stages = _stages()
    assert len(stages) >= 15
    assert [s for s in stages if f"\nstage_{s}() {{" not in text] == []
    assert [s for s in stages if not re.search(rf"^#   {s}\s", header, re.M)] == []


def test_a_wrong_stage_is_one_line_and_exit_2(tmp_path):
    p = subprocess.run(["bash", str(GPU), "tests", "nosuch"], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out")}, timeout=30)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "'nosuch'" in p.stderr
    assert not (tmp_path / "out").exists()


def test_at_most_four_gpu_scripts():
    assert len(list((ROOT / "scripts").glob("gpu*"))) <= 4
