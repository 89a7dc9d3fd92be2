"""The asynchronous MDP interface: controllers of different kinds in one MDP, agents that join and
leave mid-episode, one batched inference per policy per tick, the fragments the learner receives,
and Gymnasium environments with discrete and continuous actions."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from lamarckian_hpc.config import ModelConfig
from lamarckian_hpc.mdp import (
    AGENT_ID,
    MDP,
    AgentHandle,
    AgentId,
    Controller,
    EpisodeResult,
    ExperienceBatch,
    ExperienceBuffer,
    FrozenPolicyController,
    GymMDP,
    PolicyOutput,
    Sampler,
    ScriptedController,
    StepOutcome,
    TrainingController,
)
from lamarckian_hpc.mdp.gc_pause import gc_paused
from lamarckian_hpc.models import ActorCritic
from lamarckian_hpc.runtime.actor.inference import TorchPolicy

# CartPole-v1 ends an episode when the cart leaves [-2.4, 2.4] or the pole tilts past 12 degrees.
CARTPOLE_POSITION_LIMIT = 2.4
CARTPOLE_ANGLE_LIMIT_RADIANS = 12 * 2 * np.pi / 360


class RaceMDP(MDP):
    """A race on a line: every agent starts at 0, action 1 moves one cell and 0 stays, the reward is
    the action, and an agent that reaches `finish` terminates.

    `join_at` adds agents after a given tick and `leave_at` removes an agent after a given tick
    with a truncated outcome. An agent observes [env_code, agent_code, position, clock], so that
    rows of a batched inference can be traced back to their MDP and agent.
    """

    def __init__(
        self,
        starting_agents: tuple[str, ...],
        finish: int,
        env_code: int = 0,
        join_at: dict[str, int] | None = None,
        leave_at: dict[str, int] | None = None,
    ) -> None:
        super().__init__()
        self.starting_agents = starting_agents
        self.finish = finish
        self.env_code = env_code
        self.join_at = dict(join_at or {})
        self.leave_at = dict(leave_at or {})
        self.roster = sorted({*starting_agents, *self.join_at})
        self.positions: dict[str, int] = {}
        self.clock = 0
        self.num_resets = 0

    def reset(self, seed: int | None = None) -> None:
        self.positions = {agent_id: 0 for agent_id in self.starting_agents}
        self.clock = 0
        self.num_resets += 1
        self.pending_actions.clear()

    def agent_ids(self) -> list[AgentId]:
        return list(self.positions)

    def observation(self, agent_id: AgentId) -> np.ndarray:
        return np.array(
            [self.env_code, self.roster.index(agent_id), self.positions[agent_id], self.clock], dtype=np.float32
        )

    def tick(self) -> dict[AgentId, StepOutcome]:
        self.clock += 1
        outcomes: dict[AgentId, StepOutcome] = {}
        for agent_id, action in self.pending_actions.items():
            if agent_id not in self.positions:
                continue
            self.positions[agent_id] += int(action)
            terminated = self.positions[agent_id] >= self.finish
            truncated = not terminated and self.leave_at.get(agent_id) == self.clock
            outcomes[agent_id] = StepOutcome(self.observation(agent_id), float(action), terminated, truncated)
            if terminated or truncated:
                del self.positions[agent_id]
        for agent_id, join_tick in self.join_at.items():
            if join_tick == self.clock:
                self.positions[agent_id] = 0
        return outcomes

    def observation_space(self, agent_id: AgentId) -> gym.Space:
        return gym.spaces.Box(0.0, np.inf, shape=(4,), dtype=np.float32)

    def action_space(self, agent_id: AgentId) -> gym.Space:
        return gym.spaces.Discrete(2)


class CountingPolicy:
    """A batched policy function that records every observation batch it is called with."""

    def __init__(self, act: Callable[[np.ndarray], np.ndarray], log_prob: float = -0.5) -> None:
        self.act = act
        self.log_prob = log_prob
        self.batches: list[np.ndarray] = []

    def __call__(self, observations: np.ndarray) -> PolicyOutput:
        self.batches.append(observations.copy())
        actions = self.act(observations)
        return PolicyOutput(actions, np.full(len(observations), self.log_prob, dtype=np.float32))

    @property
    def batch_sizes(self) -> list[int]:
        return [len(batch) for batch in self.batches]


def always_move(observations: np.ndarray) -> np.ndarray:
    return np.ones(len(observations), dtype=np.int64)


def move_on_even_clock(observation: np.ndarray) -> int:
    return int(observation[3]) % 2 == 0


class FinalObservationLog(gym.Wrapper):
    """Keeps the observation with which each episode of the wrapped environment ended."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.final_observations: list[np.ndarray] = []

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            self.final_observations.append(np.array(observation, copy=True))
        return observation, reward, terminated, truncated, info


@dataclass(frozen=True)
class FragmentView:
    """The steps of one fragment of an ExperienceBatch, and how it ends."""

    observations: np.ndarray
    actions: np.ndarray
    log_probs: np.ndarray
    rewards: np.ndarray
    policy_versions: np.ndarray
    terminated: bool
    bootstrap_observation: np.ndarray

    def __len__(self) -> int:
        return len(self.rewards)


def split_fragments(batch: ExperienceBatch) -> list[FragmentView]:
    """Cut a flat batch at its fragment lengths, checking that every per-step array has one row per step."""
    num_steps = len(batch)
    assert int(batch.lengths.sum()) == num_steps
    assert (batch.lengths >= 1).all()
    for steps in (batch.observations, batch.actions, batch.log_probs, batch.policy_versions):
        assert len(steps) == num_steps
    assert batch.terminated.shape == (batch.num_fragments,)
    assert len(batch.bootstrap_observations) == batch.num_fragments
    assert batch.observations.dtype == np.float32
    assert batch.bootstrap_observations.dtype == np.float32
    ends = np.cumsum(batch.lengths)
    views = []
    for index, (start, stop) in enumerate(zip(ends - batch.lengths, ends)):
        view = FragmentView(
            observations=batch.observations[start:stop],
            actions=batch.actions[start:stop],
            log_probs=batch.log_probs[start:stop],
            rewards=batch.rewards[start:stop],
            policy_versions=batch.policy_versions[start:stop],
            terminated=bool(batch.terminated[index]),
            bootstrap_observation=batch.bootstrap_observations[index],
        )
        for name, steps in batch.fragment(index).items():
            np.testing.assert_array_equal(steps, getattr(view, name))
        views.append(view)
    return views


# ---------------------------------------------------------------------------------------------- a. controller kinds
def test_training_and_scripted_controllers_share_one_mdp() -> None:
    race = RaceMDP(("learner", "sparring"), finish=4)
    experience = ExperienceBuffer()
    policy = CountingPolicy(always_move, log_prob=-0.25)

    def controller_for(env_index: int, agent_id: AgentId) -> Controller:
        if agent_id == "learner":
            return TrainingController("learner_policy", experience)
        return ScriptedController(move_on_even_clock)

    sampler = Sampler([race], controller_for, {"learner_policy": policy})
    sampler.policy_versions["learner_policy"] = 7
    # The learner moves every tick and finishes after tick 4; the sparring agent moves on even
    # clocks (0, 2, 4, 6) and finishes after tick 7, which ends the episode.
    for _ in range(4):
        sampler.tick()
    assert sampler.completed == [EpisodeResult("learner", "learner_policy", 4.0, 4, True)]
    assert race.agent_ids() == ["sparring"]
    for _ in range(3):
        sampler.tick()
    assert race.num_resets == 2  # the episode ended after tick 7 and the sampler started the next one
    assert sampler.env_frames == 7
    assert [result.agent_id for result in sampler.completed] == ["learner"]
    # Only the learner needs inference, one call per tick while it races; the new episode's
    # decision is answered on the next tick.
    assert policy.batch_sizes == [1, 1, 1, 1]

    fragments = split_fragments(experience.take())
    assert len(fragments) == 1
    fragment = fragments[0]
    assert len(fragment) == 4
    learner_code = race.roster.index("learner")
    expected_observations = [[0, learner_code, step, step] for step in range(4)]
    np.testing.assert_array_equal(fragment.observations, np.array(expected_observations, dtype=np.float32))
    np.testing.assert_array_equal(fragment.actions, [1, 1, 1, 1])
    np.testing.assert_array_equal(fragment.rewards, [1.0, 1.0, 1.0, 1.0])
    np.testing.assert_allclose(fragment.log_probs, [-0.25] * 4)
    np.testing.assert_array_equal(fragment.policy_versions, [7, 7, 7, 7])
    assert fragment.terminated is True
    np.testing.assert_array_equal(fragment.bootstrap_observation, [0, learner_code, 4, 4])
    sampler.close()


def test_frozen_policy_controller_and_one_batched_call_per_policy_per_tick() -> None:
    num_envs, finish = 3, 5
    races = [RaceMDP(("learner", "frozen"), finish=finish, env_code=index) for index in range(num_envs)]
    experience = ExperienceBuffer()
    learner_policy = CountingPolicy(always_move)
    frozen_policy = CountingPolicy(always_move)

    def controller_for(env_index: int, agent_id: AgentId) -> Controller:
        if agent_id == "learner":
            return TrainingController("learner", experience)
        return FrozenPolicyController("snapshot")

    sampler = Sampler(races, controller_for, {"learner": learner_policy, "snapshot": frozen_policy})
    num_ticks = finish + 2  # one whole episode and two ticks of the next one
    for _ in range(num_ticks):
        sampler.tick()

    assert sampler.env_frames == num_envs * num_ticks
    assert learner_policy.batch_sizes == [num_envs] * num_ticks
    assert frozen_policy.batch_sizes == [num_envs] * num_ticks
    for tick, (learner_batch, frozen_batch) in enumerate(zip(learner_policy.batches, frozen_policy.batches)):
        step = tick % finish
        expected_learner = [[index, races[index].roster.index("learner"), step, step] for index in range(num_envs)]
        expected_frozen = [[index, races[index].roster.index("frozen"), step, step] for index in range(num_envs)]
        np.testing.assert_array_equal(learner_batch, expected_learner)
        np.testing.assert_array_equal(frozen_batch, expected_frozen)

    assert [result.agent_id for result in sampler.completed] == ["learner"] * num_envs
    assert all(result.length == finish and result.terminated for result in sampler.completed)
    fragments = split_fragments(experience.take())
    assert [fragment.terminated for fragment in fragments] == [True] * num_envs + [False] * num_envs
    assert [len(fragment) for fragment in fragments] == [finish] * num_envs + [2] * num_envs
    assert sum(len(fragment) for fragment in fragments) == num_envs * num_ticks
    sampler.close()


# ---------------------------------------------------------------------------------------------- b. join and leave
def test_agents_that_leave_and_join_mid_episode() -> None:
    # a races to 6; b leaves after tick 3, truncated; c appears after tick 2 and finishes after tick 8.
    race = RaceMDP(("a", "b"), finish=6, join_at={"c": 2}, leave_at={"b": 3})
    experience = ExperienceBuffer()
    policy = CountingPolicy(always_move)
    factory_calls: list[tuple[int, AgentId]] = []

    def controller_for(env_index: int, agent_id: AgentId) -> Controller:
        factory_calls.append((env_index, agent_id))
        return TrainingController("shared", experience)

    sampler = Sampler([race], controller_for, {"shared": policy})
    assert factory_calls == [(0, "a"), (0, "b")]
    sampler.tick()
    sampler.tick()
    assert factory_calls == [(0, "a"), (0, "b"), (0, "c")]
    sampler.tick()
    assert sampler.completed == [EpisodeResult("b", "shared", 3.0, 3, False)]
    assert sorted(race.agent_ids()) == ["a", "c"]
    for _ in range(5):
        sampler.tick()
    assert race.num_resets == 2
    assert factory_calls == [(0, "a"), (0, "b"), (0, "c"), (0, "a"), (0, "b")]
    assert sampler.completed == [
        EpisodeResult("b", "shared", 3.0, 3, False),
        EpisodeResult("a", "shared", 6.0, 6, True),
        EpisodeResult("c", "shared", 6.0, 6, True),
    ]
    # One call per tick; c joins the batch from tick 3, b leaves it after tick 3, a after tick 6.
    assert policy.batch_sizes == [2, 2, 3, 2, 2, 2, 1, 1]

    fragments = split_fragments(experience.take())
    code = {agent_id: race.roster.index(agent_id) for agent_id in race.roster}
    agents = [int(fragment.observations[0, 1]) for fragment in fragments]
    assert agents == [code["b"], code["a"], code["c"]]
    left, finished_a, joined = fragments
    assert len(left) == 3 and left.terminated is False
    np.testing.assert_array_equal(left.observations[:, 2], [0, 1, 2])
    np.testing.assert_array_equal(left.bootstrap_observation, [0, code["b"], 3, 3])
    assert len(finished_a) == 6 and finished_a.terminated is True
    np.testing.assert_array_equal(finished_a.bootstrap_observation, [0, code["a"], 6, 6])
    assert len(joined) == 6 and joined.terminated is True
    np.testing.assert_array_equal(joined.observations[:, 3], [2, 3, 4, 5, 6, 7])  # the clock when it acted
    np.testing.assert_array_equal(joined.observations[:, 2], [0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(joined.bootstrap_observation, [0, code["c"], 6, 8])
    sampler.close()


def test_agent_that_vanishes_without_an_outcome_is_an_error() -> None:
    class VanishingRace(RaceMDP):
        """b disappears after tick 2 without a final outcome; a finishes after tick 4."""

        def tick(self) -> dict[AgentId, StepOutcome]:
            outcomes = super().tick()
            if self.clock == 2:
                del self.positions["b"]
                del outcomes["b"]
            return outcomes

    race = VanishingRace(("a", "b"), finish=4)
    experience = ExperienceBuffer()
    sampler = Sampler([race], lambda env_index, agent_id: TrainingController("p", experience),
                      {"p": CountingPolicy(always_move)})
    for _ in range(3):
        sampler.tick()
    with pytest.raises(RuntimeError, match=r"VanishingRace .*without a final outcome for agents \['b'\]"):
        sampler.tick()


# ---------------------------------------------------------------------------------------------- c. CartPole batch
def random_cartpole_policy(seed: int) -> CountingPolicy:
    rng = np.random.default_rng(seed)
    return CountingPolicy(lambda observations: rng.integers(0, 2, size=len(observations)), log_prob=float(np.log(0.5)))


def test_cartpole_batch_of_four() -> None:
    num_envs = 4
    logs = [FinalObservationLog(gym.make("CartPole-v1")) for _ in range(num_envs)]
    mdps = [GymMDP(log) for log in logs]
    experience = ExperienceBuffer()
    policy = random_cartpole_policy(seed=0)
    sampler = Sampler(mdps, lambda env_index, agent_id: TrainingController("p", experience), {"p": policy}, seed=3)

    sampler.run_until(lambda: experience.num_steps >= 100)
    num_ticks = len(policy.batches)
    assert num_ticks == 25  # four steps per tick
    assert policy.batch_sizes == [num_envs] * num_ticks
    assert sampler.env_frames == num_envs * num_ticks
    assert experience.num_steps == 100

    fragments = split_fragments(experience.take())
    assert experience.num_steps == 0
    with pytest.raises(ValueError):
        experience.take()  # nothing recorded since the last take
    assert sum(len(fragment) for fragment in fragments) == 100
    cut = [fragment for fragment in fragments if not fragment.terminated]
    assert 1 <= len(cut) <= num_envs
    current_observations = [mdp.observation(AGENT_ID) for mdp in mdps]
    for fragment in fragments:
        assert fragment.observations.dtype == np.float32
        assert fragment.observations.shape == (len(fragment), 4)
        assert fragment.actions.shape == (len(fragment),)
        assert set(np.unique(fragment.actions)) <= {0, 1}
        np.testing.assert_array_equal(fragment.rewards, np.ones(len(fragment)))
    for fragment in cut:
        # A cut fragment's bootstrap is the observation its environment is at now.
        assert any(np.array_equal(fragment.bootstrap_observation, observation) for observation in current_observations)

    # Run on with the random policy: CartPole episodes end within a few dozen steps.
    sampler.run_until(lambda: experience.num_steps >= 400)
    fragments = split_fragments(experience.take())
    finished = [fragment for fragment in fragments if fragment.terminated]
    assert len(finished) >= 4
    final_observations = [observation for log in logs for observation in log.final_observations]
    assert len(sampler.completed) == len(final_observations)
    assert all(result.terminated for result in sampler.completed)
    for fragment in finished:
        final = fragment.bootstrap_observation
        assert any(np.array_equal(final, observation) for observation in final_observations)
        assert abs(final[0]) > CARTPOLE_POSITION_LIMIT or abs(final[2]) > CARTPOLE_ANGLE_LIMIT_RADIANS
        inside = (np.abs(fragment.observations[:, 0]) <= CARTPOLE_POSITION_LIMIT) & (
            np.abs(fragment.observations[:, 2]) <= CARTPOLE_ANGLE_LIMIT_RADIANS
        )
        assert inside.all()
    sampler.close()


def test_same_seed_gives_same_fragments() -> None:
    def sample(seed: int) -> list[np.ndarray]:
        mdps = [GymMDP(gym.make("CartPole-v1")) for _ in range(2)]
        experience = ExperienceBuffer()
        sampler = Sampler(mdps, lambda env_index, agent_id: TrainingController("p", experience),
                          {"p": random_cartpole_policy(seed=1)}, seed=seed)
        sampler.run_until(lambda: experience.num_steps >= 60)
        observations = [fragment.observations for fragment in split_fragments(experience.take())]
        sampler.close()
        return observations

    first, second, other_seed = sample(5), sample(5), sample(6)
    assert len(first) == len(second)
    for first_observations, second_observations in zip(first, second):
        np.testing.assert_array_equal(first_observations, second_observations)
    assert not np.array_equal(first[0][0], other_seed[0][0])


# ---------------------------------------------------------------------------------------------- d. continuous actions
def test_pendulum_with_torch_policy() -> None:
    torch.manual_seed(0)
    num_envs, episode_steps = 2, 200
    mdps = [GymMDP(gym.make("Pendulum-v1")) for _ in range(num_envs)]
    model = ActorCritic(mdps[0].observation_space(AGENT_ID), mdps[0].action_space(AGENT_ID), ModelConfig())
    experience = ExperienceBuffer()
    sampler = Sampler(mdps, lambda env_index, agent_id: TrainingController("main", experience),
                      {"main": TorchPolicy(model)})
    for _ in range(episode_steps):
        sampler.tick()

    assert sampler.env_frames == num_envs * episode_steps
    assert [(result.length, result.terminated) for result in sampler.completed] == [(episode_steps, False)] * num_envs
    fragments = split_fragments(experience.take())
    assert len(fragments) == num_envs
    for fragment in fragments:
        assert len(fragment) == episode_steps
        assert fragment.terminated is False
        assert fragment.observations.shape == (episode_steps, 3)
        assert fragment.actions.shape == (episode_steps, 1)
        assert np.issubdtype(fragment.actions.dtype, np.floating)
        assert np.all(fragment.rewards <= 0.0)
        # Pendulum observes (cos, sin, angular velocity).
        bootstrap = fragment.bootstrap_observation
        assert bootstrap[0] ** 2 + bootstrap[1] ** 2 == pytest.approx(1.0, abs=1e-5)
        assert not np.array_equal(bootstrap, fragment.observations[-1])
        # The log-probabilities recorded at sampling time are those the loss recomputes.
        with torch.no_grad():
            log_probs, _, _ = model.evaluate(
                torch.from_numpy(fragment.observations), torch.from_numpy(fragment.actions)
            )
        np.testing.assert_allclose(fragment.log_probs, log_probs.numpy(), rtol=1e-4, atol=1e-4)
    sampler.close()


def test_continuous_actions_keep_the_policy_dtype() -> None:
    mdp = GymMDP(gym.make("Pendulum-v1"))
    experience = ExperienceBuffer()
    policy = CountingPolicy(lambda observations: np.zeros((len(observations), 1), dtype=np.float32))
    sampler = Sampler([mdp], lambda env_index, agent_id: TrainingController("main", experience), {"main": policy})
    for _ in range(3):
        sampler.tick()
    assert experience.take().actions.dtype == np.float32
    sampler.close()


# ---------------------------------------------------------------------------------------------- e. misuse
class SleepingController(Controller):
    """Awaits an asyncio sleep, which the sampler cannot answer."""

    def __init__(self, steps_before_sleeping: int) -> None:
        self.steps_before_sleeping = steps_before_sleeping

    async def run(self, agent: AgentHandle) -> None:
        for _ in range(self.steps_before_sleeping):
            await agent.step(1)
        await asyncio.sleep(0)


def test_controller_awaiting_asyncio_sleep_at_start_raises_type_error() -> None:
    race = RaceMDP(("a",), finish=5)
    with pytest.raises(TypeError, match=r"controllers may await only agent\.act\(\.\.\.\), agent\.decide\(\.\.\.\) and agent\.step"):
        Sampler([race], lambda env_index, agent_id: SleepingController(0), {})


def test_controller_awaiting_asyncio_sleep_mid_episode_raises_type_error() -> None:
    race = RaceMDP(("a",), finish=5)
    sampler = Sampler([race], lambda env_index, agent_id: SleepingController(2), {})
    sampler.tick()
    with pytest.raises(TypeError, match="controllers may await only"):
        sampler.tick()


def test_controller_awaiting_a_future_raises_type_error() -> None:
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()

        class FutureController(Controller):
            async def run(self, agent: AgentHandle) -> None:
                await future

        with pytest.raises(TypeError, match="controllers may await only"):
            Sampler([RaceMDP(("a",), finish=5)], lambda env_index, agent_id: FutureController(), {})
    finally:
        loop.close()


def test_unknown_policy_id_names_the_known_ones() -> None:
    experience = ExperienceBuffer()
    sampler = Sampler(
        [RaceMDP(("a",), finish=5)],
        lambda env_index, agent_id: TrainingController("missing", experience),
        {"present": CountingPolicy(always_move)},
    )
    with pytest.raises(KeyError, match="missing.*present"):
        sampler.tick()


def test_tick_pauses_the_garbage_collector_for_itself_only() -> None:
    """The collector is off during a tick, on again after it (after an error too), and a caller
    that turned it off keeps it off."""
    enabled_during_inference: list[bool] = []

    def move_and_note(observations: np.ndarray) -> np.ndarray:
        enabled_during_inference.append(gc.isenabled())
        return always_move(observations)

    sampler = Sampler([RaceMDP(("a",), finish=50)], lambda env_index, agent_id: FrozenPolicyController("p"),
                      {"p": CountingPolicy(move_and_note)})
    try:
        assert gc.isenabled()
        sampler.tick()
        assert gc.isenabled() and enabled_during_inference == [False]
        gc.disable()
        sampler.tick()
        assert not gc.isenabled() and enabled_during_inference == [False, False]
    finally:
        gc.enable()
    sampler.policies = {}
    with pytest.raises(KeyError, match="unknown policy id"):
        sampler.tick()
    assert gc.isenabled()
    sampler.close()
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause does not end the outer one
    assert gc.isenabled()
