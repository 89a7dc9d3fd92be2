"""What each spawned learner rank of tests/test_learner_group.py runs, and the batches they share.

A module of its own (not the test module) so that processes started with the spawn method import
it by name. Ranks write what they got to .npz files; the test reads them, so nothing is pickled
between the processes but the arguments of the spawn.
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path

import gymnasium as gym
import numpy as np

from lamarckian_hpc.config import RunConfig
from lamarckian_hpc.mdp import ExperienceBatch
from lamarckian_hpc.rl.data_parallel import empty_experience

#: Learner version at the update: the steps' policy versions 0..3 give staleness 0..3.
VERSION = 3
CASES: dict[str, dict] = {
    # name: algorithm, model, fragment lengths of each rank's shard (ranks in order)
    "ppo_mlp_4": {"algorithm": "ppo", "model": "mlp", "shards": [[40, 60, 50], [70, 80], [30, 90, 30], [150]]},
    "ppo_mlp_4_uneven": {"algorithm": "ppo", "model": "mlp", "shards": [[200, 113, 20], [], [97], [1, 5, 164]]},
    "ppo_mlp_2": {"algorithm": "ppo", "model": "mlp", "shards": [[64, 200, 36], [150, 150]]},
    "ppo_cnn_2": {"algorithm": "ppo", "model": "cnn", "shards": [[50, 30], [70, 50]]},
    "impala_2": {"algorithm": "impala", "model": "mlp", "shards": [[100, 120, 90], [200, 90]]},
    "impala_2_empty": {"algorithm": "impala", "model": "mlp", "shards": [[], [300, 300]]},
    # A NaN reward at rank 1's first step: the minibatches that draw it are skipped on every rank.
    "impala_2_nan": {"algorithm": "impala", "model": "mlp", "shards": [[100, 120, 90], [200, 90]], "nan": (1, 0)},
}


def case_config(name: str) -> RunConfig:
    case = CASES[name]
    algorithm = {"name": case["algorithm"], "batch_size": 512, "num_minibatches": 4, "num_epochs": 2,
                 "learning_rate": 1e-3}
    model = {"kind": case["model"], "policy_hidden_sizes": [64, 64], "critic_hidden_sizes": [32]}
    return RunConfig.model_validate({"seed": 7, "algorithm": algorithm, "model": model,
                                     "runtime": {"device": "cpu"}})


def case_spaces(name: str) -> tuple[gym.Space, gym.Space]:
    if CASES[name]["model"] == "cnn":
        return gym.spaces.Box(0, 255, (16, 16, 1), np.uint8), gym.spaces.Discrete(3)
    return gym.spaces.Box(-5, 5, (4,), np.float32), gym.spaces.Discrete(2)


def shard(name: str, rank: int) -> ExperienceBatch:
    """Rank `rank`'s shard of case `name`: random fragments, the same wherever they are made."""
    lengths = CASES[name]["shards"][rank]
    observation_space, action_space = case_spaces(name)
    if not lengths:  # what a rank that received nothing hands to its learner
        return empty_experience(observation_space, action_space)
    rng = np.random.default_rng([sum(map(ord, name)), rank])
    steps = int(sum(lengths))

    def observations(count: int) -> np.ndarray:
        if observation_space.dtype == np.uint8:
            return rng.integers(0, 256, (count, *observation_space.shape), dtype=np.uint8)
        return rng.normal(size=(count, *observation_space.shape)).astype(np.float32)

    rewards = rng.normal(size=steps).astype(np.float32)
    if CASES[name].get("nan", (None,))[0] == rank:
        rewards[CASES[name]["nan"][1]] = np.nan
    return ExperienceBatch(
        observations=observations(steps), actions=rng.integers(0, action_space.n, steps).astype(np.int64),
        log_probs=(np.log(1.0 / action_space.n) + rng.normal(scale=0.3, size=steps)).astype(np.float32),
        rewards=rewards,
        policy_versions=rng.integers(0, VERSION + 1, steps).astype(np.int64),
        lengths=np.asarray(lengths, dtype=np.int64), terminated=rng.random(len(lengths)) < 0.5,
        bootstrap_observations=observations(len(lengths)))


def global_batch(name: str) -> ExperienceBatch:
    """Every rank's shard end to end, in rank order: what one learner trains on."""
    from lamarckian_hpc.runtime.messages import concatenate

    return concatenate([shard(name, rank) for rank in range(len(CASES[name]["shards"]))])


def learn(name: str, experience: ExperienceBatch, reducer: object = None) -> tuple[dict, dict]:
    """(weights after one update, its diagnostics) of a fresh learner of case `name`."""
    from lamarckian_hpc.runtime.algorithms import make_learner

    learner = make_learner(case_config(name), *case_spaces(name), reducer=reducer)
    learner.version = VERSION
    diagnostics = learner.update(experience, env_frames=1000)
    return learner.weights(), diagnostics


def save(path: Path, weights: dict, diagnostics: dict) -> None:
    np.savez(path, **{f"w/{key}": value for key, value in weights.items()},
             **{f"d/{key}": np.float64(value) for key, value in diagnostics.items()})


def run_rank(jobs: list[dict], out: str) -> None:
    """Run `jobs` in order: each forms a group (rank, world_size, port, timeout), runs its cases or
    its check, and leaves the group."""
    import torch

    from lamarckian_hpc.runtime.learner.group import LearnerGroupError, LearnerGroupSpec, form_group

    torch.set_num_threads(1)
    folder = Path(out)
    try:
        for job in jobs:
            spec = LearnerGroupSpec(job["rank"], job["world_size"], "127.0.0.1", job["port"], "gloo",
                                    job.get("timeout", 30.0))
            reducer = form_group(spec)
            (folder / f"interface-{jobs[0]['rank']}.txt").write_text(os.environ["GLOO_SOCKET_IFNAME"])
            for name in job.get("cases", ()):
                save(folder / f"{name}-{spec.rank}.npz", *learn(name, shard(name, spec.rank), reducer))
            if job.get("dead_rank"):  # rank 1 dies; rank 0's next collective names it
                if spec.rank == 1:
                    os._exit(0)
                started = time.monotonic()
                try:
                    reducer.all_gather_counts(5)
                    message = "no error"
                except LearnerGroupError as error:
                    message = f"{error}\n{error.ranks}"
                (folder / "dead_rank.txt").write_text(f"{time.monotonic() - started:.3f}\n{message}")
                continue
            if job.get("missing_rank"):  # rank 0 waits in a collective that rank 1 never joins
                if spec.rank == 0:
                    started = time.monotonic()
                    try:
                        reducer.all_reduce_sum_([torch.ones(3)])
                        message = "no error"
                    except LearnerGroupError as error:
                        message = f"{error}\n{error.ranks}"
                    (folder / "missing_rank.txt").write_text(f"{time.monotonic() - started:.3f}\n{message}")
                else:  # alive, elsewhere, until rank 0 has given up on it
                    deadline = time.monotonic() + spec.timeout_seconds * 3 + 5
                    while not (folder / "missing_rank.txt").exists() and time.monotonic() < deadline:
                        time.sleep(0.05)
                continue  # the group is broken: leave it to the process's end
            reducer.close()
    except BaseException:
        (folder / f"error-{jobs[0]['rank']}.txt").write_text(traceback.format_exc())
        raise
