"""Turn-based (AEC) PettingZoo games and legal-action masks: the adapter answers only the player
whose turn it is and credits both players their result, every policy samples and trains on legal
actions only, and a league learns Connect Four without an illegal move.

Real PettingZoo games (connect_four_v3, tictactoe_v3), real networks, a real league run."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from lamarckian_hpc.config import EnvConfig, ModelConfig, load_config
from lamarckian_hpc.config.league_run import LeagueRunConfig
from lamarckian_hpc.evorl.league_evaluation import WinOrBlockConnectFour, play_against, play_against_random
from lamarckian_hpc.mdp import ExperienceBuffer, MaskedDiscrete, PolicyOutput, RandomLegalPolicy, Sampler
from lamarckian_hpc.models import ActorCritic
from lamarckian_hpc.multiagent import AECEnvMDP, PolicyMapping, alternating_seats_mapping, fixed_mapping
from lamarckian_hpc.runtime.actor.multiagent_sampling import make_pettingzoo_mdp
from lamarckian_hpc.runtime.actor.network_layout import actor_critic_layout
from lamarckian_hpc.runtime.actor.numpy_policy import NumpyActorCriticPolicy

ROOT = Path(__file__).resolve().parents[1]
CONNECT_FOUR = "pettingzoo:pettingzoo.classic.connect_four_v3"
TICTACTOE = "pettingzoo:pettingzoo.classic.tictactoe_v3"
#: (env id, observation entries before the mask, actions)
GAMES = [(CONNECT_FOUR, 6 * 7 * 2, 7), (TICTACTOE, 3 * 3 * 2, 9)]


class UnmaskedRandom:
    """A player that ignores the mask: any action, uniformly (what the masks must prevent)."""

    def __init__(self, num_actions: int, seed: int) -> None:
        self.num_actions, self.rng = num_actions, np.random.default_rng(seed)

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        actions = self.rng.integers(0, self.num_actions, len(observations))
        return PolicyOutput(actions, np.zeros(len(actions), np.float32))


def _self_play(env_id: str, policies: dict, ticks: int, num_envs: int = 4):
    """Both seats of `num_envs` games, each player its own policy; (mdps, finished episodes)."""
    mdps = [make_pettingzoo_mdp(EnvConfig(id=env_id)) for _ in range(num_envs)]
    seats = mdps[0].env.possible_agents
    experiences = {pid: ExperienceBuffer() for pid in policies}
    mapping = PolicyMapping(fixed_mapping(dict(zip(seats, policies))), list(policies), list(policies), experiences)
    sampler = Sampler(mdps, mapping, policies, seed=1)
    for _ in range(ticks):
        sampler.tick()
    return mdps, sampler.take_completed(), experiences


@pytest.mark.parametrize("env_id,board,actions", GAMES, ids=["connect_four", "tictactoe"])
def test_an_aec_game_by_id_is_adapted_with_flat_observations_and_the_mask_at_their_end(env_id, board, actions):
    mdp = make_pettingzoo_mdp(EnvConfig(id=env_id))
    assert isinstance(mdp, AECEnvMDP) and mdp.masked
    mdp.reset(seed=0)
    first, second = mdp.env.possible_agents
    assert mdp.agent_ids() == [first]  # the second player joins at its first turn
    row = mdp.observation(first)
    assert row.dtype == np.float32 and row.shape == (board + actions,) == mdp.observation_space(first).shape
    raw = mdp.env.observe(first)
    np.testing.assert_array_equal(row[board:], raw["action_mask"])
    np.testing.assert_array_equal(row[:board], np.ravel(raw["observation"]))
    space = mdp.action_space(first)
    assert isinstance(space, MaskedDiscrete) and space.n == actions and space == gym.spaces.Discrete(actions)


def test_turns_alternate_and_each_player_is_answered_at_its_next_turn_with_the_board_then():
    mdp = make_pettingzoo_mdp(EnvConfig(id=CONNECT_FOUR))
    mdp.reset(seed=0)
    rng = np.random.default_rng(0)
    order, answered = [], []
    while mdp.agent_ids():
        acting = mdp.env.agent_selection
        legal = np.flatnonzero(mdp.observation(acting)[-7:])
        mdp.set_action(acting, int(rng.choice(legal)))
        for agent in mdp.agent_ids():  # nobody else has an action waiting: only the acting player decides
            assert agent == acting or agent not in mdp.pending_actions
        order.append(acting)
        outcomes = mdp.tick()
        answered.append(sorted(outcomes))
        if mdp.agent_ids():  # mid-game: only the player whose turn it is now gets its outcome
            now = mdp.env.agent_selection
            assert now != acting and list(outcomes) in ([], [now])
            if outcomes:
                np.testing.assert_array_equal(outcomes[now].observation, mdp.observation(now))
    assert order[::2] == ["player_0"] * len(order[::2]) and order[1::2] == ["player_1"] * len(order[1::2])
    assert answered[0] == [] and answered[-1] == ["player_0", "player_1"]  # both get their final outcome


@pytest.mark.parametrize("env_id,board,actions", GAMES, ids=["connect_four", "tictactoe"])
def test_masked_players_never_play_an_illegal_move_and_both_players_get_their_result(env_id, board, actions):
    mdp = make_pettingzoo_mdp(EnvConfig(id=env_id))
    first = mdp.env.possible_agents[0]
    layout = actor_critic_layout(mdp.observation_space(first), mdp.action_space(first),
                                 ModelConfig(policy_hidden_sizes=(32,)))
    assert layout.mask_size == actions
    # A freshly initialised (random) network against the uniformly random legal player.
    policies = {"net": NumpyActorCriticPolicy(layout, "tanh", seed=3),
                "random": RandomLegalPolicy(mdp.action_space(first), 4)}
    mdps, episodes, experiences = _self_play(env_id, policies, ticks=600)
    assert sum(m.illegal_actions for m in mdps) == 0
    returns = {pid: [e.episode_return for e in episodes if e.policy_id == pid] for pid in policies}
    games = min(len(returns["net"]), len(returns["random"]))
    assert games >= 50  # 2,400 moves
    # PettingZoo ends a game on an illegal move with -1 for the offender and 0 for the other: never here.
    for net, random in zip(returns["net"][:games], returns["random"][:games]):
        assert net in (-1.0, 0.0, 1.0) and net + random == 0.0
    assert {-1.0, 1.0} <= set(returns["net"])
    batch = experiences["net"].take()
    legal = batch.observations[:, board:] > 0.5
    assert legal[np.arange(len(batch)), batch.actions].all()  # every recorded action was legal where taken
    rewards_at_ends = np.cumsum(batch.lengths) - 1
    assert set(np.unique(batch.rewards[rewards_at_ends])) <= {-1.0, 0.0, 1.0}


def test_the_illegal_move_counter_sees_a_player_that_ignores_the_mask():
    """The control of the test above: without the mask, full columns do get played."""
    policies = {"blind": UnmaskedRandom(7, 0), "random": RandomLegalPolicy(MaskedDiscrete(7), 1)}
    mdps, episodes, _ = _self_play(CONNECT_FOUR, policies, ticks=600)
    assert sum(m.illegal_actions for m in mdps) > 0
    # ... and then PettingZoo's own illegal-move ending: -1 to the offender, 0 to the other
    blind = [e.episode_return for e in episodes if e.policy_id == "blind"]
    assert -1.0 in blind


def _masked_model(seed: int = 0) -> tuple[ActorCritic, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    space = gym.spaces.Box(-np.inf, np.inf, (5 + 4,), np.float32)
    model = ActorCritic(space, MaskedDiscrete(4), ModelConfig(policy_hidden_sizes=(16,), activation="tanh"))
    with torch.no_grad():  # logits far from uniform, so that masking them matters
        model.head.logits.weight.normal_(0, 1)
    features = torch.randn(64, 5)
    mask = torch.rand(64, 4) < 0.5
    mask[torch.arange(64), torch.randint(0, 4, (64,))] = True  # at least one legal action a row
    return model, torch.cat([features, mask.float()], dim=1), mask


def test_masked_ppo_log_probs_and_entropy_are_those_of_the_softmax_over_legal_actions_only():
    model, observations, legal = _masked_model()
    logits = model.head.logits(model.trunk(observations)).detach()
    actions = torch.stack([torch.multinomial(row.float(), 1)[0] for row in legal])  # a legal action a row
    log_probs, entropy, _ = model.evaluate(observations, actions)
    for row in range(len(observations)):
        legal_logits = logits[row][legal[row]]
        expected = torch.log_softmax(legal_logits, dim=0)
        position = int(legal[row][: actions[row]].sum())  # the action's index among the legal ones
        assert torch.allclose(log_probs[row], expected[position], atol=1e-5)
        assert torch.allclose(entropy[row], -(expected.exp() * expected).sum(), atol=1e-5)
    # sampling draws legal actions only, with the log-probabilities the loss will compute
    sampled, sampled_log_probs = model.act(observations.repeat(20, 1))
    assert legal.repeat(20, 1)[torch.arange(len(sampled)), sampled].all()
    evaluated, _, _ = model.evaluate(observations.repeat(20, 1), sampled)
    assert torch.allclose(sampled_log_probs, evaluated, atol=1e-5)
    # the loss gives illegal logits no gradient, and the legal ones finite gradients
    kept: list[torch.Tensor] = []

    def keep(module: torch.nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        output.retain_grad()
        kept.append(output)

    model.head.logits.register_forward_hook(keep)
    log_probs, entropy, _ = model.evaluate(observations, actions)
    (log_probs.sum() + entropy.sum()).backward()
    gradient = kept[0].grad
    assert (gradient[~legal] == 0).all() and torch.isfinite(gradient).all() and (gradient[legal] != 0).any()


def test_the_numpy_policy_samples_and_scores_as_the_masked_torch_model_does():
    from lamarckian_hpc.mdp import action_masks
    from lamarckian_hpc.models import heads

    assert heads.MASKED_LOGIT == action_masks.MASKED_LOGIT  # one value on both sides (models cannot import mdp)
    model, observations, legal = _masked_model(seed=1)
    layout = actor_critic_layout(gym.spaces.Box(-np.inf, np.inf, (9,), np.float32), MaskedDiscrete(4),
                                 ModelConfig(policy_hidden_sizes=(16,), activation="tanh"))
    policy = NumpyActorCriticPolicy(layout, "tanh", seed=0)
    policy.load_weights({name: tensor.detach().numpy() for name, tensor in model.state_dict().items()})
    rows = observations.numpy()
    output = policy(np.repeat(rows, 20, axis=0))
    assert np.repeat(legal.numpy(), 20, axis=0)[np.arange(len(output.actions)), output.actions].all()
    expected, _, _ = model.evaluate(torch.from_numpy(np.repeat(rows, 20, axis=0)), torch.from_numpy(output.actions))
    np.testing.assert_allclose(output.log_probs, expected.detach().numpy(), atol=1e-4)
    np.testing.assert_allclose(policy.log_probs(rows, np.zeros(len(rows), np.int64))[legal[:, 0].numpy()],
                               model.evaluate(observations, torch.zeros(len(rows)))[0].detach().numpy()[
                                   legal[:, 0].numpy()], atol=1e-4)


def test_alternating_seats_swap_every_game_and_start_apart_in_neighbouring_environments():
    mapping = alternating_seats_mapping(["a", "b"], "learner", "opponent")
    games0 = [(mapping("a", 0), mapping("b", 0)) for _ in range(3)]
    games1 = [(mapping("b", 1), mapping("a", 1)) for _ in range(2)]  # either order within a game
    assert games0 == [("learner", "opponent"), ("opponent", "learner"), ("learner", "opponent")]
    assert games1 == [("learner", "opponent"), ("opponent", "learner")]  # env 1 starts in seat b
    with pytest.raises(ValueError, match="two different agents"):
        alternating_seats_mapping(["a", "a"], "x", "y")


def test_the_evaluation_against_random_counts_every_game_from_both_seats():
    record = play_against_random(RandomLegalPolicy(MaskedDiscrete(7), 5), EnvConfig(id=CONNECT_FOUR),
                                 ("player_0", "player_1"), games=100, seed=0)
    assert record.games == 100 and record.illegal_actions == 0
    assert 0.3 <= record.win_rate <= 0.7  # random against random, seats alternating
    assert record.score == pytest.approx((record.wins - record.losses) / 100)


def _connect_four_row(own: list[tuple[int, int]], other: list[tuple[int, int]]) -> np.ndarray:
    """The adapter's row for a board with pieces at (row, column), row 5 the bottom."""
    board = np.zeros((6, 7, 2), np.float32)
    for side, pieces in enumerate((own, other)):
        for row, column in pieces:
            board[row, column, side] = 1.0
    legal = (board.sum(axis=2)[0] == 0).astype(np.float32)
    return np.concatenate([board.ravel(), legal])


def test_the_win_or_block_player_completes_its_four_then_blocks_and_beats_random():
    player = WinOrBlockConnectFour(seed=0)
    wins_in_column_3 = _connect_four_row(own=[(5, 0), (5, 1), (5, 2)], other=[(4, 0), (4, 1), (3, 0)])
    blocks_column_6 = _connect_four_row(own=[(5, 0), (4, 0)], other=[(5, 6), (4, 6), (3, 6)])
    win_over_block = _connect_four_row(own=[(5, 3), (4, 3), (3, 3)], other=[(5, 6), (4, 6), (3, 6)])
    diagonal = _connect_four_row(own=[(5, 0), (4, 1), (3, 2), (4, 2), (5, 3)],
                                 other=[(5, 1), (5, 2), (4, 3), (3, 3)])  # column 3 lands on (2, 3): the diagonal
    actions = player(np.stack([wins_in_column_3, blocks_column_6, win_over_block, diagonal])).actions
    assert actions.tolist() == [3, 6, 3, 3]
    record = play_against(player, RandomLegalPolicy(MaskedDiscrete(7), 1), EnvConfig(id=CONNECT_FOUR),
                          ("player_0", "player_1"), games=50, seed=0)
    assert record.illegal_actions == 0 and record.win_rate >= 0.8


def test_a_pong_evaluation_of_a_board_game_league_is_one_line():
    with pytest.raises(ValueError, match="algorithm.scripted_opponent: pong measures"):
        load_config(ROOT / "configs" / "league_connect_four.yaml", ["algorithm.scripted_opponent=pong"],
                    LeagueRunConfig)


TINY = ["env.num_envs=4", "ppo.batch_size=128", "ppo.num_minibatches=2", "ppo.num_epochs=1",
        "model.policy_hidden_sizes=[16]", "league.snapshot_interval=2", "league.exploiter_max_updates=2"]


def test_a_tiny_connect_four_league_trains_every_learner_on_legal_moves_only():
    from lamarckian_hpc.evorl.league_learners import LeagueLearners

    torch.set_num_threads(1)
    config = load_config(ROOT / "configs" / "league_connect_four.yaml", TINY, LeagueRunConfig)
    learners = LeagueLearners(config, [0, 1, 2])
    try:
        answers = [learners.update_all([None, None, None]) for _ in range(3)]
        games = sum(a["wins"] + a["draws"] + a["losses"] for round_ in answers for a in round_)
        assert games > 0 and all(np.isfinite(a["diagnostics"]["loss_policy"]) for a in answers[-1])
        for learner in learners.members.values():
            mdps = learner.trainer.sampler.mdps
            assert all(isinstance(mdp, AECEnvMDP) for mdp in mdps)
            assert sum(mdp.illegal_actions for mdp in mdps) == 0
        score, win_rate = learners.score_against_scripted(0, 10, seed=7)
        assert -1 <= score <= 1 and 0 <= win_rate <= 1
    finally:
        learners.close()


def test_the_connect_four_league_runs_from_its_config_and_records_its_win_rate_against_random(tmp_path):
    from lamarckian_hpc.cli import main
    from lamarckian_hpc.storage import open_run

    overrides = [*TINY, "algorithm.generations=2", "algorithm.scripted_evaluation_interval=2",
                 "algorithm.scripted_evaluation_episodes=10", "runtime.mode=serial", f"storage.directory={tmp_path}",
                 "storage.run_name=c4"]
    assert main(["league", str(ROOT / "configs" / "league_connect_four.yaml"), *overrides]) == 0
    with open_run(tmp_path / "c4.h5") as reader:
        win_rate = reader.metric("main_win_rate_vs_scripted").value
        assert len(win_rate) == 2 and np.isnan(win_rate[0]) and 0 <= win_rate[1] <= 1
        assert (reader.metric("illegal_actions").value == 0).all()  # every learner's games, every generation
