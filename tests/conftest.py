import os
import sys

import pytest

# torch threads for every test: 1 by default (two cores: one per test process avoids oversubscription
# stalls); scripts/test.sh reruns the float_sensitive tests at 2, since a GEMM splits its sums by thread count.
THREADS = int(os.environ.get("ATLAS_AB_TEST_THREADS", "1"))


def pytest_configure(config):
    config.addinivalue_line("markers", "float_sensitive: compares float results of torch computations "
                                       "(scripts/test.sh runs these under 1 and 2 threads)")
    try:
        import torch
        torch.set_num_threads(THREADS)
    except ImportError:
        return
    if not torch.cuda.is_available():
        # Without a GPU the runtime's Triton kernels are tested through Triton's interpreter
        # (tests/runtime/test_kernels.py). It is chosen when triton is imported, so before any test can.
        os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _torch_threads():
    """Each test starts at THREADS: an in-process run sets torch's threads from runner.threads."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != THREADS:
        torch.set_num_threads(THREADS)
    yield


def pytest_collection_modifyitems(config, items):
    try:
        import torch
        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        skip = pytest.mark.skip(reason="needs a CUDA device")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
