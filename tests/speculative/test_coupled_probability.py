"""Replay's exact acceptance probability: under the maximal coupling, the draft equals the
trajectory's token y with probability min(p(y), q(y)) / p(y) (draws.CoupledDraws), and that is
what the verifier records as accept_prob in replay (sampling.coupled_accept_probabilities)."""
import math

import pytest
import torch

from atlas_ab.speculative.distribution import Sampling
from atlas_ab.speculative.draws import CoupledDraws
from atlas_ab.speculative.sampling import coupled_accept_probabilities

P = torch.tensor([0.40, 0.30, 0.20, 0.05, 0.05])
Q = torch.tensor([0.10, 0.50, 0.20, 0.10, 0.10])


@pytest.mark.parametrize("y, expected", [(0, 0.25), (1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0)])
def test_literal(y, expected):
    yt = torch.tensor([[y]])
    got = coupled_accept_probabilities(Q[None, None], torch.tensor([[0]]), yt, P[y].reshape(1, 1))
    assert got.item() == pytest.approx(expected, abs=1e-7)


def test_one_hot_q_is_the_indicator():
    drafts, y = torch.tensor([[3, 1]]), torch.tensor([[3, 2]])
    got = coupled_accept_probabilities(None, drafts, y, torch.full((1, 2), 0.3))
    assert got.tolist() == [[1.0, 0.0]]


def test_it_is_the_coupling_frequency():
    """20,000 independent couplings (one per document) of q with p given y = 0: the draft equals y
    with frequency 0.25, within 4 binomial sd (false failure < 1e-4)."""
    B, y = 20_000, 0
    doc = torch.arange(B)
    draws = CoupledDraws(Sampling(temperature=1.0), 11, doc, 0, torch.zeros(B, dtype=torch.long), 1,
                         y=torch.full((B, 1), y), p=P.expand(B, 1, -1))
    x = draws.draw(0, Q.expand(B, -1))
    expected = coupled_accept_probabilities(Q.expand(B, 1, -1), x[:, None], torch.full((B, 1), y),
                                            P[y].expand(B, 1))
    assert torch.allclose(expected, torch.full((B, 1), 0.25))
    freq = (x == y).double().mean().item()
    assert abs(freq - 0.25) < 4 * math.sqrt(0.25 * 0.75 / B)
