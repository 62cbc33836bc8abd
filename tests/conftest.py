import os

import pytest


def pytest_configure(config):
    try:
        import torch
        # Two cores: one thread per test process avoids oversubscription stalls.
        torch.set_num_threads(1)
    except ImportError:
        return
    if not torch.cuda.is_available():
        # Without a GPU the runtime's Triton kernels are tested through Triton's interpreter
        # (tests/runtime/test_kernels.py). It is chosen when triton is imported, so before any test can.
        os.environ.setdefault("TRITON_INTERPRET", "1")


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
