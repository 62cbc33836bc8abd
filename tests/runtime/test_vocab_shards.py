"""The vocab-sharded top-1 (atlas_ab/runtime/vocab_shards.py): the index is exactly the unsharded argmax,
ties included (the lowest index wins, as torch.argmax's); the probability is the unsharded softmax max
within 2e-6 relative (fp32 sums in another order)."""
import pytest
import torch

from atlas_ab.runtime.vocab_shards import shard_bounds, sharded_top1

SHARDS = [1, 2, 4, 8]
#: the CPU always; the GPU where there is one (its argmax's tie rule and its reduce are another kernel's)
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU")])]


def unsharded(z):
    return torch.softmax(z.float(), dim=-1).max(dim=-1).values, z.argmax(dim=-1)


def by_shards(z, shards):
    return sharded_top1(lambda v0, v1: z[:, v0:v1], shard_bounds(z.shape[-1], shards))


def test_torch_argmax_takes_the_first_index_of_a_tie():
    z = torch.tensor([[0.0, 3.0, 1.0, 3.0, 3.0]])
    assert z.argmax(-1).item() == 1 and z.max(-1).indices.item() == 1


def test_shard_bounds_cover_the_vocabulary_in_order_and_refuse_a_remainder():
    assert shard_bounds(4096, 4) == [(0, 1024), (1024, 2048), (2048, 3072), (3072, 4096)]
    with pytest.raises(ValueError, match="do not divide"):
        shard_bounds(4097, 2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shards", SHARDS)
def test_sharded_top1_is_the_unsharded_one_on_random_logits(shards, device):
    torch.manual_seed(shards)
    z = (torch.randn(64, 4096) * 3).to(device)
    p, i = by_shards(z, shards)
    p_ref, i_ref = unsharded(z)
    assert torch.equal(i, i_ref)
    torch.testing.assert_close(p, p_ref, rtol=2e-6, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shards", SHARDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ties_across_shard_boundaries_go_to_the_lowest_index(shards, dtype, device):
    """Forced ties: the max at both sides of every shard boundary, at the first and last index, in one shard
    only, and a row of equal logits; bf16 logits (what a bf16 head makes, where ties are common) too."""
    V = 64
    n = V // shards
    rows = []
    pairs = [((n - 1) % V, n % V), (0, V - 1), (V - 1, 0), (n % V, (2 * n - 1) % V), (n // 2, V - n // 2),
             (V - 2, V - 1)]
    for a, b in pairs:
        r = torch.zeros(V)
        r[a] = r[b] = 5.0
        rows.append(r)
    r = torch.zeros(V)
    r[[n * s for s in range(shards)]] = 7.0          # the first index of every shard
    rows.append(r)
    r = torch.zeros(V)
    r[[n * s + n - 1 for s in range(shards)]] = 7.0  # the last index of every shard
    rows.append(r)
    rows.append(torch.full((V,), 1.25))               # every logit equal: index 0
    z = torch.stack(rows).to(dtype).to(device)
    p, i = by_shards(z, shards)
    p_ref, i_ref = unsharded(z)
    assert torch.equal(i, i_ref)
    assert i.tolist()[:len(pairs)] == [min(a, b) for a, b in pairs] and i[-1] == 0
    torch.testing.assert_close(p, p_ref, rtol=2e-6, atol=0)


def test_a_tie_between_shards_is_won_by_the_lower_shard_whatever_the_shard_order_of_maxima():
    z = torch.full((1, 16), -1.0)
    z[0, 13], z[0, 2], z[0, 9] = 4.0, 4.0, 4.0     # shards of 4: the max in shards 3, 0, 2
    assert by_shards(z, 4)[1].item() == 2
