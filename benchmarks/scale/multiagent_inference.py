"""Multi-agent inference throughput: many agents in one environment, several policies, one process.

RLlib's paper measured policy evaluation with 10,000 agents in one environment, mapped onto 10
policies of 16x16 fully connected layers with small float observations, and reported over 70k
actions/s per core. This script runs the same setup through the asynchronous MDP interface: one
`Sampler`, a controller coroutine per agent, a `PolicyMapping` that binds each agent to a random
policy when it appears, and one batched inference per policy per tick. The environment is a
trivial vectorised random walk (4 floats per agent), so the figure measures the sampling path
(controllers, batching, inference, outcomes), not a game.

Two rows: agents with frozen-policy controllers (act only, as in RLlib's evaluation), and agents
with training controllers that also record every step into their policy's buffer (the buffers are
emptied every few ticks, as a learner would). Actions/s per core is actions over the process's
CPU seconds (one process, torch threads 1), which stays fair on a loaded machine; the wall-clock
rate is printed beside it.

`--distributed` runs the same crowd through the distributed runtime instead: a multi-agent
`DistributedTrainer` with `--actors` Ray actor processes, each stepping one crowd of its share of
the agents (benchmarks/scale/crowd_env.py, by env id `pettingzoo:benchmarks.scale.crowd_env`, through the PettingZoo
adapter) and acting with the torch-free numpy policies of the actors, the agents mapped at random
onto the policies when they appear. The actors only send experience, so every agent has a
training controller (the act + record row of the one-process mode); the learner in this process
updates each policy on batches of `--batch-size` agent steps, one epoch, and broadcasts the
weights. Actions are counted from the env steps the learner received (every agent acts every tick)
between the first update after `--warmup` seconds and the last; per core means over the actor
processes' CPU seconds in that window, and also over the whole run's (learner, Ray and actors).

    python benchmarks/scale/multiagent_inference.py [--agents 10000] [--policies 10] [--seconds 10]
    python benchmarks/scale/multiagent_inference.py --distributed [--actors 2 4] [--seconds 20]

Prints a Markdown table and writes benchmarks/results/multiagent_inference.json (distributed:
its entry `distributed`).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks import common  # noqa: E402
from lamarckian_hpc.config import ModelConfig  # noqa: E402
from lamarckian_hpc.mdp import MDP, ExperienceBuffer, Sampler, StepOutcome  # noqa: E402
from lamarckian_hpc.multiagent import PolicyMapping, build_policy_models, random_mapping  # noqa: E402
from lamarckian_hpc.runtime.actor.inference import TorchPolicy  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results" / "multiagent_inference.json"
OBSERVATION_SIZE = 4
NO_INFO: dict = {}


class CrowdMDP(MDP):
    """`num_agents` agents doing a random walk in one environment; every agent acts every tick."""

    agents_join_mid_episode = False

    def __init__(self, num_agents: int, episode_ticks: int = 1000) -> None:
        super().__init__()
        self.num_agents, self.episode_ticks = num_agents, episode_ticks
        self.rng = np.random.default_rng(0)
        self.ids = list(range(num_agents))
        self.positions = np.zeros((num_agents, OBSERVATION_SIZE), np.float32)
        self.rows: list[np.ndarray] = []
        self.clock = 0

    def reset(self, seed: int | None = None) -> None:
        self.positions = self.rng.standard_normal((self.num_agents, OBSERVATION_SIZE)).astype(np.float32)
        self.rows = list(self.positions)
        # One outcome object per agent, refreshed in place each tick (the sampler reads outcomes only
        # within the tick, as GymMDP's reused dict relies on too): the environment's own cost stays
        # a few array operations plus one attribute store per agent.
        self.outcomes = {agent: StepOutcome(self.rows[agent], 0.0, False, False, NO_INFO) for agent in self.ids}
        self.outcome_list = list(self.outcomes.values())
        self.clock = 0
        self.pending_actions.clear()

    def agent_ids(self) -> list[int]:
        return self.ids if self.clock < self.episode_ticks else []

    def observation(self, agent_id: int) -> np.ndarray:
        return self.rows[agent_id]

    def ready(self) -> bool:
        return len(self.pending_actions) == self.num_agents

    def tick(self) -> dict[int, StepOutcome]:
        # In agent order: the sampler fills pending_actions policy by policy, not agent by agent.
        actions = np.fromiter(map(self.pending_actions.__getitem__, self.ids), np.int64, self.num_agents)
        # A new array each tick, not an in-place update: recorded observations must not change later.
        self.positions = self.positions * np.float32(0.9) + (actions[:, None] - 0.5).astype(np.float32) * 0.1
        self.rows = rows = list(self.positions)
        self.clock += 1
        for outcome, row in zip(self.outcome_list, rows):
            outcome.observation = row
        if self.clock >= self.episode_ticks:
            for outcome in self.outcome_list:
                outcome.truncated = True
        return self.outcomes

    def observation_space(self, agent_id: int) -> gym.Space:
        return gym.spaces.Box(-np.inf, np.inf, (OBSERVATION_SIZE,), np.float32)

    def action_space(self, agent_id: int) -> gym.Space:
        return gym.spaces.Discrete(2)


def measure(num_agents: int, num_policies: int, seconds: float, record: bool) -> dict[str, float]:
    policy_ids = [f"policy_{k}" for k in range(num_policies)]
    mdp = CrowdMDP(num_agents)
    models = build_policy_models(policy_ids, policy_ids if record else (), mdp.observation_space(0),
                                 mdp.action_space(0), ModelConfig(policy_hidden_sizes=(16, 16),
                                                                  critic_hidden_sizes=(16,)))
    experiences = {pid: ExperienceBuffer() for pid in policy_ids} if record else {}
    mapping = PolicyMapping(random_mapping(policy_ids, seed=0), policy_ids, experiences, experiences)
    sampler = Sampler([mdp], mapping, {pid: TorchPolicy(model) for pid, model in models.items()}, seed=0)
    for _ in range(5):  # warm-up: first inferences, allocator
        sampler.tick()
    ticks, inference_seconds = 0, 0.0
    policies = sampler.policies
    timed = {pid: _Timed(policy) for pid, policy in policies.items()}
    sampler.policies = timed
    wall_start, cpu_start = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall_start < seconds:
        for _ in range(10):
            sampler.tick()
        ticks += 10
        if record:
            for buffer in experiences.values():
                buffer.take()
    wall, cpu = time.perf_counter() - wall_start, time.process_time() - cpu_start
    inference_seconds = sum(t.seconds for t in timed.values())
    actions = ticks * num_agents
    sampler.close()
    return {"actions": actions, "ticks": ticks, "wall_seconds": wall, "cpu_seconds": cpu,
            "actions_per_cpu_second": actions / cpu, "actions_per_wall_second": actions / wall,
            "inference_share": inference_seconds / wall,
            "agents_per_policy_min": min(mapping.counts.values()), "agents_per_policy_max": max(mapping.counts.values())}


class _Timed:
    """Wraps a policy to measure the time spent in batched inference."""

    def __init__(self, policy) -> None:
        self.policy, self.seconds = policy, 0.0

    def __call__(self, observations: np.ndarray):
        start = time.perf_counter()
        output = self.policy(observations)
        self.seconds += time.perf_counter() - start
        return output


def measure_distributed(args: argparse.Namespace, num_actors: int) -> dict:
    """The crowd on `num_actors` actor processes of a multi-agent distributed run (see the docstring)."""
    import psutil

    from lamarckian_hpc.config import RunConfig
    from lamarckian_hpc.runtime.placement.process_stats import TreeCpuMeter
    from lamarckian_hpc.runtime.runners.distributed import DistributedTrainer

    share = args.agents // num_actors
    policy_ids = [f"policy_{k}" for k in range(args.policies)]
    config = RunConfig.model_validate({
        "seed": 0,
        "env": {"id": "pettingzoo:benchmarks.scale.crowd_env", "num_envs": 1, "kwargs": {"num_agents": share}},
        "model": {"policy_hidden_sizes": [16, 16], "critic_hidden_sizes": [16]},
        "algorithm": {"batch_size": args.batch_size, "num_epochs": 1, "num_minibatches": 1},
        "multiagent": {"policies": policy_ids, "mapping": "random"},
        # One message per policy every `--message-ticks` ticks of an actor's crowd.
        "runtime": {"mode": "ray", "sampling": "async", "num_actors": num_actors, "device": "cpu",
                    "torch_threads": 1, "rollout_steps": share * args.message_ticks},
        "stop": {"total_env_steps": 10**12, "max_wall_seconds": args.warmup + args.seconds},
    })
    marks: dict[str, tuple] = {}
    num_cores = os.cpu_count() or 1

    class Observer:
        run_cpu = 0.0  # CPU seconds of the whole process tree since the window began
        previous = 0.0

        def on_update_end(self, report) -> None:
            now = time.monotonic()
            busy = tree.sample()  # the tree's busy cores since the previous update
            if report.wall_time < args.warmup:
                self.previous = now
                return
            if "first" in marks:
                self.run_cpu += busy * num_cores * (now - self.previous)
            self.previous = now
            pids = sorted(trainer.actor_pids.values())
            cpu = sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids if psutil.pid_exists(pid))
            mark = (now, report.env_frames, cpu, self.run_cpu, report.update)
            marks.setdefault("first", mark)
            marks["last"] = mark

        def on_train_end(self, result) -> None:
            pass

    tree = TreeCpuMeter(num_cores)
    trainer = DistributedTrainer(config, [Observer()])
    try:
        trainer.train()
    finally:
        trainer.close()
    if "first" not in marks or marks["first"] is marks["last"]:
        raise SystemExit(f"fewer than two updates after {args.warmup} s; give --seconds more time")
    (start, frames_start, cpu_start, _, update_start), (end, frames_end, cpu_end, run_cpu, update_end) = \
        marks["first"], marks["last"]
    wall = end - start
    actions = (frames_end - frames_start) * share  # every agent acts every tick of its crowd
    actor_cpu = cpu_end - cpu_start
    return {"actors": num_actors, "agents_per_actor": share, "actions": actions, "wall_seconds": wall,
            "updates": update_end - update_start, "actor_cpu_seconds": actor_cpu, "run_cpu_seconds": run_cpu,
            "actions_per_actor_cpu_second": actions / actor_cpu, "actions_per_run_cpu_second": actions / run_cpu,
            "actions_per_wall_second": actions / wall}


def main_distributed(args: argparse.Namespace) -> None:
    rows = [measure_distributed(args, num_actors) for num_actors in args.actors]
    print(f"\n{args.agents} agents, {args.policies} policies of 16x16, numpy policies in the actor processes, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| actors | agents per actor | actions/s per actor core | actions/s per core (whole run) | actions/s (wall) "
          "| updates |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['actors']} | {row['agents_per_actor']:,} | {row['actions_per_actor_cpu_second']:,.0f} "
              f"| {row['actions_per_run_cpu_second']:,.0f} | {row['actions_per_wall_second']:,.0f} "
              f"| {row['updates']} |")
    # The distributed mode's figures are the results file's entry `distributed` unless --label names another.
    label = "distributed" if args.label == common.DEFAULT_LABEL else args.label
    common.write_results(RESULTS, {
        "benchmark": "multiagent_inference_distributed", "agents": args.agents, "policies": args.policies,
        "hidden_sizes": [16, 16], "observation_size": OBSERVATION_SIZE, "batch_size": args.batch_size,
        "message_ticks": args.message_ticks, "warmup_seconds": args.warmup, "seconds": args.seconds,
        "rllib_reported_actions_per_second_per_core": 70_000, "rows": rows}, label)
    print(f"\nwrote {RESULTS} ({label})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10_000)
    parser.add_argument("--policies", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds (per row)")
    parser.add_argument("--distributed", action="store_true", help="through the distributed runtime's actors")
    parser.add_argument("--actors", type=int, nargs="+", default=[2, 4],
                        help="--distributed: actor processes, one run per count")
    parser.add_argument("--batch-size", type=int, default=20_000,
                        help="--distributed: agent steps per update of a policy")
    parser.add_argument("--message-ticks", type=int, default=4,
                        help="--distributed: ticks of an actor's crowd per experience message of a policy")
    parser.add_argument("--warmup", type=float, default=5.0, help="--distributed: seconds of training not measured")
    common.add_common_args(parser)
    args = parser.parse_args()
    if args.distributed:
        main_distributed(args)
        return
    torch.set_num_threads(1)
    rows = []
    for label, record in (("act only (frozen policies)", False), ("act + record (training controllers)", True)):
        result = measure(args.agents, args.policies, args.seconds, record)
        rows.append({"controllers": label, **result})
    print(f"\n{args.agents} agents, {args.policies} policies of 16x16, 1 process, torch threads 1, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    print("| controllers | actions/s per core (CPU time) | actions/s (wall) | inference share of wall | ticks |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['controllers']} | {row['actions_per_cpu_second']:,.0f} | {row['actions_per_wall_second']:,.0f} "
              f"| {row['inference_share']:.0%} | {row['ticks']} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(RESULTS, {
        "benchmark": "multiagent_inference", "agents": args.agents, "policies": args.policies,
        "hidden_sizes": [16, 16], "observation_size": OBSERVATION_SIZE, "seconds": args.seconds,
        "torch_threads": 1, "rllib_reported_actions_per_second_per_core": 70_000, "target": 100_000,
        "machine": {"cpu_count": os.cpu_count(), "torch": torch.__version__},
        "rows": rows}, args.label)
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
