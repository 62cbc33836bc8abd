"""SideStream: work forked beside the current stream is visible once joined, eagerly and inside a
captured CUDA graph; off CUDA the block runs in line."""
import pytest
import torch

from atlas_ab.runtime.side_stream import SideStream


def test_on_the_cpu_the_block_runs_in_line_and_join_does_nothing():
    side = SideStream(torch.device("cpu"))
    x = torch.zeros(3)
    with side.fork():
        x += 1
    assert side.stream is None and not side.pending
    side.join()
    assert x.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.gpu
def test_forked_work_is_joined_eagerly_and_in_a_captured_graph():
    dev = torch.device("cuda")
    side = SideStream(dev)
    a = torch.arange(1 << 12, device=dev, dtype=torch.float32)   # every sum below exact in fp32
    out = torch.zeros(2, device=dev)

    def step():
        b = a * 2                                   # the path
        with side.fork():                           # reads what the path made, writes its own buffer
            out[0] = b.sum()
        c = a + 1                                   # the path goes on meanwhile
        side.join()
        out[1] = out[0] + c.sum()                   # after the join: the side's value is there

    step()
    torch.cuda.synchronize()
    n = float(1 << 12)
    want = [n * (n - 1), n * (n - 1) + n * (n - 1) / 2 + n]
    torch.testing.assert_close(out.cpu(), torch.tensor(want), rtol=0, atol=0)
    out.zero_()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()                                      # warm-up off the capture stream
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        step()
    out.zero_()
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out.cpu(), torch.tensor(want), rtol=0, atol=0)
    assert not side.pending


@pytest.mark.gpu
def test_what_the_block_reads_stays_alive_until_the_join():
    """A temporary the path drops while the side still reads it is not freed (and so not handed
    to the path's next allocation) before the join."""
    import weakref
    side = SideStream(torch.device("cuda"))
    x = torch.ones(1 << 20, device="cuda")
    alive = weakref.ref(x)
    with side.fork(x):
        y = x.sum()
    del x
    assert alive() is not None
    side.join()
    assert alive() is None and float(y) == float(1 << 20)
