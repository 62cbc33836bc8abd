"""The joblib launcher's device assignment (issue #14), on the CPU: job n takes cuda:(n % count),
never a GPU another running job holds, and waits only when every GPU is held."""
import threading
import time

import pytest

from atlas_ab.run import device
from atlas_ab.run.device import DeviceClaim


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch):
    monkeypatch.setattr(device, "_STICKY", None)     # each test is a process that claimed nothing yet


def test_each_job_takes_its_own_gpu(tmp_path):
    a = DeviceClaim("auto", 0, count=2, lock_dir=str(tmp_path))
    b = DeviceClaim("auto", 1, count=2, lock_dir=str(tmp_path))
    assert (a.device, b.device) == ("cuda:0", "cuda:1")
    a.release()
    b.release()


def test_a_job_whose_gpu_is_held_takes_the_free_one(tmp_path):
    held = DeviceClaim("auto", 0, count=2, lock_dir=str(tmp_path))      # job 0 still running on cuda:0
    late = DeviceClaim("auto", 2, count=2, lock_dir=str(tmp_path))      # job 2 prefers cuda:0 too
    assert late.device == "cuda:1"
    held.release()
    late.release()


def test_with_every_gpu_held_a_job_waits_for_its_own(tmp_path):
    holders = [DeviceClaim("auto", i, count=2, lock_dir=str(tmp_path)) for i in (0, 1)]
    got = []
    t = threading.Thread(target=lambda: got.append(DeviceClaim("auto", 3, count=2, lock_dir=str(tmp_path))))
    t.start()
    time.sleep(0.3)
    assert not got                                     # blocked: no GPU is free
    holders[1].release()                               # job 1 ends: cuda:1 (job 3's preference) frees
    t.join(timeout=5)
    assert got and got[0].device == "cuda:1"
    got[0].release()
    holders[0].release()


def test_one_gpu_and_no_gpu_need_no_lock(tmp_path):
    assert DeviceClaim("auto", 5, count=1, lock_dir=str(tmp_path)).device == "cuda:0"
    assert DeviceClaim("auto", 5, count=0, lock_dir=str(tmp_path)).device == "cpu"
    assert DeviceClaim("cuda:1", 0, count=2, lock_dir=str(tmp_path)).device == "cuda:1"
    assert not list(tmp_path.iterdir())


def test_a_worker_keeps_its_gpu_for_its_next_job(tmp_path, monkeypatch):
    """A launcher's worker process runs job after job: it stays on the GPU it first claimed."""
    first = DeviceClaim("auto", 1, count=2, lock_dir=str(tmp_path))
    assert first.device == "cuda:1"
    first.release()
    again = DeviceClaim("auto", 2, count=2, lock_dir=str(tmp_path))   # job 2 would prefer cuda:0
    assert again.device == "cuda:1"
    again.release()
