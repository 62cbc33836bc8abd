"""scripts/device_transfer.py: runs packed whole, a folder bundled into the GPU machine's 8 files,
the reports' raw runs parked and restored (tiny literal files)."""
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import device_transfer  # noqa: E402


def _run(d: Path, size: int) -> Path:
    (d / "steps").mkdir(parents=True)
    (d / "events").mkdir()
    (d / ".hydra").mkdir()
    (d / "manifest.json").write_text("{}")
    (d / "steps" / "0.parquet").write_bytes(b"x" * size)
    (d / "events" / "0.parquet").write_bytes(b"e")
    (d / ".hydra" / "config.yaml").write_text("a: 1")
    (d / ".lock").write_text("")
    return d


def test_pack_keeps_whole_runs_and_events_only_for_the_arms_named(tmp_path):
    sweep = tmp_path / "sweep"
    _run(sweep / "0_baseline", 600_000)
    _run(sweep / "1_refeed_on", 600_000)
    out = tmp_path / "out"
    out.mkdir()
    device_transfer.main(["pack", "--out", str(out), "--name", "c", "--events", "refeed_on", "--max-mib", "1",
                          str(sweep)])
    assert sorted(p.name for p in out.iterdir()) == ["c-1.tar.xz", "c-2.tar.xz"]     # 1.2 MB over two files
    names = [sorted(tarfile.open(out / f"c-{i}.tar.xz").getnames()) for i in (1, 2)]
    assert names == [["sweep/0_baseline/manifest.json", "sweep/0_baseline/steps/0.parquet"],
                     ["sweep/1_refeed_on/events/0.parquet", "sweep/1_refeed_on/manifest.json",
                      "sweep/1_refeed_on/steps/0.parquet"]]


def test_bundle_fits_a_folder_into_the_files_allowed(tmp_path):
    for i in range(11):
        (tmp_path / f"f{i:02d}.txt").write_text("y" * (i + 1))
    assert device_transfer.main(["bundle", str(tmp_path)]) == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 8
    bundled = [n for f in files if f.startswith("bundle_") for n in tarfile.open(tmp_path / f).getnames()]
    assert sorted(bundled + [f for f in files if not f.startswith("bundle_")]) == [f"f{i:02d}.txt" for i in range(11)]


def test_bundle_counts_the_files_inside_folders(tmp_path):
    # four files at the top and five in a folder: nine files, one more than the device returns
    for i in range(4):
        (tmp_path / f"top{i}.txt").write_text("x" * (i + 1))
    (tmp_path / "ladder").mkdir()
    for i in range(5):
        (tmp_path / "ladder" / f"in{i}.txt").write_text("y" * (i + 10))
    assert device_transfer.main(["bundle", str(tmp_path)]) == 0
    left = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(left) <= 8
    names = [str(p.relative_to(tmp_path)) for p in left if not p.name.startswith("bundle_")]
    names += [n for p in left if p.name.startswith("bundle_") for n in tarfile.open(p).getnames()]
    assert sorted(names) == sorted([f"top{i}.txt" for i in range(4)] + [f"ladder/in{i}.txt" for i in range(5)])


def test_bundle_refuses_what_cannot_fit(tmp_path, capsys):
    for i in range(3):
        (tmp_path / f"f{i}.bin").write_bytes(b"z" * 2048)
    assert device_transfer.main(["bundle", str(tmp_path), "--files", "1", "--max-mib", "0.001"]) == 1
    assert "do not fit" in capsys.readouterr().err


def test_park_then_restore_leaves_the_tree_as_it_was(tmp_path):
    runs = tmp_path / "analysis" / "reports" / "r1" / "runs"
    runs.mkdir(parents=True)
    (runs / "a.tar.xz").write_bytes(b"a")
    device_transfer.park(tmp_path)
    assert not runs.exists() and (tmp_path / ".parked" / "analysis" / "reports" / "r1" / "runs" / "a.tar.xz").exists()
    assert device_transfer.restore(tmp_path) == 0
    assert (runs / "a.tar.xz").read_bytes() == b"a"


def test_restore_never_overwrites(tmp_path):
    (tmp_path / ".parked" / "analysis" / "reports" / "r1" / "runs").mkdir(parents=True)
    (tmp_path / "analysis" / "reports" / "r1" / "runs").mkdir(parents=True)
    assert device_transfer.restore(tmp_path) == 1
