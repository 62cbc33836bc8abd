"""Tree replay (issue 40): a tree arm's verify read from the stored greedy trajectory
(`ReplayTarget.verify(tree=)`), literally on a hand-built trajectory, and a tree arm replayed
against its live run on the tiny models: the same steps, pairing position by position with the
linear arms on one trajectory. Discrete outcomes compared exactly; the drafter's floats bit for
bit over the live run's own target outputs, to rounding over the built trajectory
(test_replay.py's module docstring says why)."""
import numpy as np
import pytest
import torch

from atlas_ab import AtlasError
from atlas_ab.config.structured import (
    ArmConfig,
    ModelConfig,
    RunnerConfig,
    SamplingConfig,
    WorkloadConfig,
    validate_run,
)
from atlas_ab.config.tree import parse_tree
from atlas_ab.speculative.replay_check import compare_live, replay_gate
from atlas_ab.speculative.targets import UNKNOWN, ReplayTarget
from atlas_ab.speculative.trajectory import EXTEND, Trajectory
from atlas_ab.speculative.tree_accept import greedy_walk, tree_tensors
from tests.helpers.replay_tools import REPLAY_B, REPLAY_G, RecordingTarget, harvest, replay_target, run
from tests.speculative.test_replay import assert_steps_equal

pytestmark = pytest.mark.float_sensitive

G, B = REPLAY_G, REPLAY_B

TREES = {"tree_top2": ArmConfig(name="tree_top2", tree="topk:2,1"),
         "tree_deep": ArmConfig(name="tree_deep", tree="[(0,), (1,), (2,), (0, 0), (0, 1), (0, 0, 0)]", num_drafts=3)}

# node ids: 0 root, 1 (0,), 2 (1,), 3 (0,0), 4 (0,1), 5 (1,0)
VLLM = parse_tree("[(0,), (1,), (0, 0), (0, 1), (1, 0)]")


def hand_trajectory() -> Trajectory:
    """Two sequences, one turn: 3 prompt tokens (positions 0-2), G=5 generated (3-7, the turn's
    end at 7), 3 continuation tokens; the hidden at position p of sequence b is 100 b + p + 1."""
    tokens = np.array([[10, 11, 12, 20, 21, 22, 23, 24],
                       [40, 41, 42, 50, 51, 52, 53, 54]], dtype=np.int32)                        # [2, 8]
    ext = np.array([[[25, 26, 27]], [[55, 56, 57]]], dtype=np.int32)                              # [2, 1, 3]
    argmax = np.full((2, 8), -1, dtype=np.int32)
    argmax[:, 2:7] = tokens[:, 3:]                   # the argmax at p is the token at p + 1 ...
    argmax[:, 7] = ext[:, 0, 0]                      # ... and at the turn's end the continuation's first
    hiddens = (100 * torch.arange(2.)[:, None] + torch.arange(8.)[None, :] + 1)[..., None]        # [2, 8, 1]
    return Trajectory(doc_ids=np.array([0, 1]), tokens=tokens, argmax=argmax, hiddens=hiddens, ext=ext,
                      gen_start=np.array([[3], [3]]), margins=np.zeros((2, 8, 2), np.float32), gen_tokens=5)


def test_tree_verify_reads_the_trajectory_along_matched_paths():
    """Sequence 0 at n=4 (t_n=21; the trajectory goes on 22, 23, 24): node 1 (22) and its child
    4 (23) match, 2 and 3 do not, and 5 carries the trajectory's 23 under a rejected parent: unknown.
    Sequence 1 at n=6 (t_n=53; then 54, and past the turn's end 55, 56): node 2 (54) and its child
    5 (55, the continuation) match; node 3 carries 55 under a rejected node 1: unknown. A known
    node past the turn's end has its argmax (the continuation) and a zero hidden."""
    tgt = ReplayTarget(hand_trajectory(), "cpu")
    nodes = torch.tensor([[21, 22, 30, 31, 23, 23],
                          [53, 60, 54, 55, 61, 55]])                                             # [2, 6]
    n = torch.tensor([4, 6])
    pos = n[:, None] + torch.as_tensor(VLLM.depth)[None]                                         # [2, 6]
    slots = n[:, None] + torch.arange(6)[None]
    anc = torch.as_tensor(VLLM.ancestors)
    vh, target = tgt.verify(nodes, pos, slots, 12, tree=(slots[:, 0], anc))
    U = UNKNOWN
    assert target.tolist() == [[22, 23, U, U, 24, U],
                               [54, U, 55, U, U, 56]]
    assert vh[..., 0].tolist() == [[5, 6, 0, 0, 7, 0],
                                   [107, 0, 108, 0, 0, 0]]
    # the walk accepts exactly the matched paths; each bonus is known
    acc, path, best = greedy_walk(nodes, target, tree_tensors(VLLM, "cpu"), VLLM.max_depth)
    assert acc.tolist() == [2, 2] and path.tolist() == [[0, 1, 4], [0, 2, 5]] and best.tolist() == [4, 5]
    assert target[[0, 1], best].tolist() == [24, 56]
    # a K-chain is the one-path tree: without `tree` the verify reads a chain's rows as its tril mask
    chain = torch.tensor([[21, 22, 23, 99], [53, 54, 9, 56]])                                    # [2, 4]
    cpos = n[:, None] + torch.arange(4)[None]
    vh_c, t_c = tgt.verify(chain, cpos, cpos, 12)
    assert t_c.tolist() == [[22, 23, 24, U], [54, 55, U, U]]
    assert vh_c[..., 0].tolist() == [[5, 6, 7, 0], [107, 108, 0, 0]]
    vh_t, t_t = tgt.verify(chain, cpos, cpos, 12, tree=(cpos[:, 0], torch.ones(4, 4, dtype=torch.bool).tril()))
    assert torch.equal(t_t, t_c) and torch.equal(vh_t, vh_c)


def test_validate_run_takes_a_tree_arm_in_replay_and_refuses_its_sampled_replay():
    """Replay is taken now (it was refused: "no tree replay yet"); a sampled tree arm is taken live
    (tree_sampling.py) and refused in replay, in one line naming runner.mode (coupled tree replay
    is not built)."""
    arm, model, wl = ArmConfig(name="tree_top2", tree="topk:2,1"), ModelConfig(), WorkloadConfig()
    validate_run(arm, model, wl, RunnerConfig(mode="replay", trajectories="runs/trajectories"))
    validate_run(arm, model, wl, RunnerConfig(mode="live"))
    sampled = WorkloadConfig(sampling=SamplingConfig(temperature=1.0))
    validate_run(arm, model, sampled, RunnerConfig(mode="live"))
    with pytest.raises(AtlasError) as e:
        validate_run(arm, model, sampled, RunnerConfig(mode="replay", trajectories="runs/trajectories"))
    assert "runner.mode=replay" in str(e.value) and "\n" not in str(e.value)


@pytest.fixture(scope="module")
def lives(models, docs):
    """Each tree arm's live run, once: its steps, trace, and the trajectory its own target computed."""
    cache = {}

    def live(name):
        if name not in cache:
            rec = RecordingTarget(models[0])
            steps, _, trace, wave = run(models, TREES[name], docs, G, target=rec)
            cache[name] = dict(live=steps, trace=trace, own=harvest(rec, wave, G, EXTEND))
        return cache[name]
    return live


@pytest.mark.parametrize("name", sorted(TREES))
def test_tree_replay_of_the_live_runs_own_target_is_bit_identical(models, docs, lives, name):
    lv = lives(name)
    rep, _, trace, _ = run(models, TREES[name], docs, G, target=replay_target(lv["own"]))
    assert_steps_equal(lv["live"], rep, exact_floats=True)
    assert replay_gate(lv["own"], trace.generated)["passed"]


@pytest.mark.parametrize("name", sorted(TREES))
def test_tree_replay_of_the_stored_trajectory_equals_live(models, docs, stored, lives, name):
    """Every discrete column (drafts, the known target tokens, accept_len, committed, tree_path,
    rows) equal live's exactly, the drafter's conf to rounding; the text is the stored trajectory's,
    and the linear baseline replayed over the same trajectory commits it too."""
    lv = lives(name)
    rep, _, trace, _ = run(models, TREES[name], docs, G, target=replay_target(stored))
    assert_steps_equal(lv["live"], rep, exact_floats=False)
    assert (rep.tree_path.map(len) == rep.accept_len + 1).all()
    assert rep.accept_len.max() == TREES[name].num_drafts          # some step took a whole path
    assert (rep.tree_path.map(lambda p: p[1] if len(p) > 1 else 0) > 1).any()   # ... and some a rank-1 node
    gate = replay_gate(stored, trace.generated)
    assert gate["passed"] and gate["checked_tokens"] == B * 3 * G
    assert trace.generated == lv["trace"].generated
    c = compare_live(stored, trace.steps.table(), lv["trace"].steps.table(), lv["trace"].generated)
    assert (c["rows_matched"], c["rows_differ"], c["trajectories_left"]) == (len(rep), 0, 0)
    _, _, chain, _ = run(models, ArmConfig(name="baseline"), docs, G, target=replay_target(stored))
    assert chain.generated == trace.generated
