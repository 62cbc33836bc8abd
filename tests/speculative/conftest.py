"""The replay tests' shared workload (test_replay.py, test_tree_replay.py): the tiny models, REPLAY_B
documents of three turns, and the one greedy trajectory every arm replays, linear and tree alike (as a
sweep shares it). Module-scoped: each module builds its own, as before."""
import pytest

from atlas_ab.speculative.trajectory import EXTEND, greedy
from tests.helpers.replay_tools import REPLAY_B, REPLAY_G
from tests.helpers.tiny import tiny_docs, tiny_models


@pytest.fixture(scope="module")
def models():
    return tiny_models()


@pytest.fixture(scope="module")
def docs():
    return tiny_docs(n=REPLAY_B, turns=3, chunk=12)


@pytest.fixture(scope="module")
def stored(models, docs):
    """The one trajectory every arm replays."""
    return greedy(models[0], docs, REPLAY_G, extend=EXTEND, keep_hiddens=True)
