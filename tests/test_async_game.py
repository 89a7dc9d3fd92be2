"""The built-in asynchronous game: players at their own tick rates, a world that advances while a
player is idle, lagging or gone, idle timeouts, and players joining mid-episode, both through the
game's own API and through the Sampler."""

from __future__ import annotations

from collections import Counter

import numpy as np

from lamarckian_hpc.envs.async_arena import MOVES, ArenaCore, AsyncArenaMDP
from lamarckian_hpc.mdp import AgentHandle, Controller, ExperienceBuffer, PolicyOutput, Sampler, TrainingController

RIGHT = MOVES.index((1, 0))


def test_the_world_advances_while_a_player_is_idle_and_times_it_out():
    core = ArenaCore(width=40, height=5, num_coins=0, idle_timeout=50, seed=1)
    fast, idle = core.connect("fast", period=1), core.connect("idle", period=2)
    fast.x, idle_position = 0, (idle.x, idle.y)
    for _ in range(20):
        core.submit("fast", RIGHT)
        assert core.advance() == ["fast"]  # only the player whose action arrived acts
    assert core.clock == 20 and fast.x == 20 and fast.actions_taken == 20
    assert idle.idle_total == 10 and (idle.x, idle.y) == idle_position and "idle" in core.players
    # With a short timeout the idle player is dropped at its 5th missed turn; the other plays on.
    core = ArenaCore(num_coins=0, idle_timeout=5)
    core.connect("fast", 1), core.connect("idle", 2)
    for tick in range(1, 16):
        core.submit("fast", 0)
        core.advance()
        if tick == 10:
            assert core.departed == {"idle": "timeout"}
    assert list(core.players) == ["fast"] and core.clock == 15 and core.players["fast"].actions_taken == 15


def test_a_player_collects_coins_and_is_rewarded_only_when_it_acts():
    core = ArenaCore(width=3, height=1, num_coins=1, seed=0)
    player = core.connect("p", period=1)
    player.x, player.y = 0, 0
    core.coins = [(1, 0)]
    core.submit("p", RIGHT)
    assert core.advance() == ["p"] and player.score == 1.0 and player.reward == 1.0
    observation = core.observation("p")
    assert observation.shape == (5,) and observation[-1] == 1.0


class Counting(Controller):
    """Acts with a fixed policy and counts its outcomes and how each ended."""

    def __init__(self, counts: Counter, endings: dict) -> None:
        self.counts, self.endings = counts, endings

    async def run(self, agent: AgentHandle) -> None:
        observation = agent.observation()
        while True:
            _, outcome = await agent.act("random", observation)
            self.counts[agent.agent_id] += 1
            if outcome.done:
                self.endings[agent.agent_id] = outcome.info.get("left", "episode end")
                return None
            observation = outcome.observation


def _random_policy(observations: np.ndarray) -> PolicyOutput:
    rng = np.random.default_rng(len(observations))
    return PolicyOutput(rng.integers(0, len(MOVES), len(observations)), np.zeros(len(observations), np.float32))


def test_players_act_at_their_own_rates_and_a_lagging_player_blocks_nobody():
    counts, endings = Counter(), {}
    mdp = AsyncArenaMDP({"fast": 1, "slow": 3}, joins={6: {"late": 2}}, max_ticks=1000, idle_timeout=8)
    sampler = Sampler([mdp], lambda env, agent: Counting(counts, endings), {"random": _random_policy})
    for _ in range(30):
        sampler.tick()
    assert mdp.core.clock == 30 and sampler.env_frames == 30
    assert counts["fast"] == 30 and counts["slow"] == 10 and counts["late"] == 12  # joined at 6, acts every 2nd
    # The slow player's actions stop arriving for 15 ticks (5 of its turns): everyone else goes on.
    mdp.lag("slow", 15)
    for _ in range(15):
        sampler.tick()
    assert mdp.core.clock == 45 and counts["fast"] == 45 and counts["late"] == 19
    assert counts["slow"] == 10 and mdp.core.players["slow"].idle_total == 5
    for _ in range(6):
        sampler.tick()
    assert counts["slow"] == 12  # back in the game at its next turns
    # A lag longer than the idle timeout (8 turns = 24 ticks) disconnects it; its controller ends.
    mdp.lag("slow", 100)
    for _ in range(30):
        sampler.tick()
    assert endings == {"slow": "timeout"} and "slow" not in mdp.core.players
    assert mdp.core.clock == 81 and counts["fast"] == 81
    sampler.close()


def test_training_controllers_record_each_player_at_its_own_rate_and_episodes_restart():
    experience = ExperienceBuffer()
    mdp = AsyncArenaMDP({"a": 1, "b": 4}, max_ticks=40)
    sampler = Sampler([mdp], lambda env, agent: TrainingController("random", experience), {"random": _random_policy})
    for _ in range(100):  # 2 full episodes of 40 world ticks and part of a third
        sampler.tick()
    finished = sampler.take_completed()
    lengths = sorted((r.agent_id, r.length) for r in finished)
    assert lengths == [("a", 40), ("a", 40), ("b", 10), ("b", 10)]
    assert all(not r.terminated for r in finished)  # the episode's end truncates every player
    assert experience.num_steps == 100 + 25
