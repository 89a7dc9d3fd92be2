"""Learner ranks 1..N-1 of a policy: Ray actors that train in lockstep with rank 0.

Rank 0 is the run's learner process (`distributed.DistributedTrainer`): it publishes the weights,
writes the run file, metrics and checkpoints. Every other rank is a `LearnerRank`, one per node by
default (`runtime.learner_placement: spread`; `pack` puts them all on rank 0's node), with its own
experience receiver and credit budget for a fixed shard of the actors (`learner.shards`). All ranks
start from the same seed, so they hold the same weights, and each update averages the gradients,
so they keep holding them; no rank ever sends weights to another.

Each update the ranks run the same collectives (`learner.lockstep`): agree, update, reduce.
A rank that dies or hangs fails the collective of the others within `runtime.learner_timeout_seconds`
(or at once, when its sockets close with its process); rank 0 then asks Ray which rank is gone and
ends the run with `LearnerRankLostError`, one line naming the rank and its node, and
`training_run` saves a checkpoint (a checkpoint is rank 0's learner state, which does not depend
on the number of ranks: a run resumes with any number). A rank that stops by itself says why in
the group's store first, and rank 0 reports that line instead: its actors stalled
(`RunStalledError`, as rank 0's own would be), or rank 0 was gone or stuck in a stage (named).
Ranks 1.. enter each update only once rank 0 does (`lockstep.RankZeroWatch`), so that rank 0's
publish, metrics and checkpoint may take longer than the timeout.

A rank is never restarted: a new process cannot rejoin a torch.distributed group mid-run.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import numpy as np
import ray
import torch
import zmq
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ...comm import BROADCAST, ExperienceReceiver, JobKeys, limit_bytes
from ...comm.topology import build_tree
from ...config import RunConfig
from ...rl.data_parallel import empty_experience
from ...rl.device import choose_device
from ..algorithms import make_learner
from ..messages import KINDS, MessageSpec, concatenate
from ..placement.cpu_quota import join_cpu_group
from ..placement.node_watch import NodeLostError
from ..placement.ray_setup import answers, reachable_host, worker_runtime_env
from ..placement.relay_tree import choose_layout
from ..placement.shards import ShardPlan, plan_flat, plan_tree
from ..run_shape import spaces_of
from .actor_watch import ActorWatch, RunStalledError
from .group import LearnerGroupSpec, TorchDistributedReducer, choose_backend, form_group, free_port
from .intake import ExperienceIntake
from .lockstep import (
    FAILED,
    STALLED,
    WAITED,
    RankZeroStages,
    RankZeroWaitError,
    RankZeroWatch,
    agree,
    post_stop,
    posted_stops,
    reduce_numbers,
)

log = logging.getLogger(__name__)


def learner_device(config: RunConfig) -> torch.device:
    """The device a rank's learner chooses (`rl.device.choose_device`, as the learner itself does)."""
    return choose_device(config.runtime.device, config.model.kind, config.algorithm.name)[0]


class LearnerRankLostError(NodeLostError):
    """A learner rank died or stopped answering; the message is one line naming the rank and its node."""


def starve_seconds(config: RunConfig) -> float:
    """Longest a rank waits for its share of a batch before it goes to the update with what it
    has (nothing, for a starved rank): well within the collective timeout, so that the ranks that
    did fill their share never time out waiting for it."""
    return config.runtime.learner_timeout_seconds / 4


class ShardLearner(ExperienceIntake):
    """A rank's shard: its receiver, the actors that report to it, and what it gathered since
    the last update."""

    def __init__(self, config: RunConfig, context: zmq.Context, host: str, keys: JobKeys | None,
                 actors: Sequence[int], credit_budget: int, spaces: tuple[Any, Any]) -> None:
        """`spaces`: the run's observation and action spaces, which its actors' messages must fit."""
        self.config = config
        # No actor of another shard reports here: the actor indices are bounded by this shard's.
        self.spec = MessageSpec.of(max(actors, default=-1) + 1, spaces)
        self.malformed_logged: dict[str, float] = {}
        self.receiver = ExperienceReceiver(context, KINDS, host=host, keys=keys,
                                           max_message_bytes=limit_bytes(config.runtime.max_message_megabytes),
                                           credit_budget=credit_budget, serve=BROADCAST)
        self.watch = ActorWatch(len(actors), config.runtime.connect_timeout_seconds,
                                config.runtime.stall_timeout_seconds, self._describe, expected=actors)
        self.hellos, self.actor_pids, self.actor_routes, self.next_sequence = {}, {}, {}, {}
        self.lost_messages = self.dropped_stale_steps = self.env_errors = 0
        self.pending: list[Any] = []
        self.pending_steps = self.frames = 0
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.last_check = time.monotonic()

    def _describe(self, indices: Sequence[int]) -> str:
        return f"actors {', '.join(map(str, indices))} never reached learner rank experience address {self.receiver.address}"

    def _while_waiting(self) -> None:
        if time.monotonic() - self.last_check >= 1.0:
            self.last_check = time.monotonic()
            self.watch.check()

    def gather(self, share: int, deadline: float) -> None:
        """Take messages until `share` steps are held or `deadline` (time.monotonic) passes."""
        while self.pending_steps < share and time.monotonic() < deadline:
            item = self._next_experience()
            if item is None:
                continue
            self.frames += item.env_frames
            self.returns.extend(np.asarray(item.episode_returns, np.float64).tolist())
            self.lengths.extend(np.asarray(item.episode_lengths, np.int64).tolist())
            if self._accept(item, self.learner.version):
                self.pending.append(item.batch)
                self.pending_steps += len(item.batch)

    def take(self, spaces: tuple[Any, Any]) -> Any:
        """The held steps as one batch (an empty one when starved), and start gathering afresh."""
        batch = concatenate(self.pending) if self.pending else empty_experience(*spaces)
        self.pending, self.pending_steps = [], 0
        return batch

    def take_episodes(self) -> tuple[list[float], list[int]]:
        returns, lengths, self.returns, self.lengths = self.returns, self.lengths, [], []
        return returns, lengths


class LearnerRank:
    """Rank 1.. of a policy's learner group, as a Ray actor (see the module's docstring)."""

    def __init__(self, config_tree: dict[str, Any], rank: int, actors: list[int], credit_budget: int,
                 share: int) -> None:
        join_cpu_group()  # the host's own cores where the test cluster gives it a quota
        self.config = RunConfig.model_validate(config_tree)
        torch.set_num_threads(self.config.runtime.torch_threads)
        self.rank, self.share = rank, share
        self.spaces = spaces_of(self.config)
        self.context = zmq.Context()
        folder = self.config.runtime.key_folder
        # Served with the broadcast pair, as a relay is: the learner's secret never leaves rank 0.
        keys = JobKeys.load(folder) if folder is not None and self.config.runtime.transport_security == "curve" else None
        # Bound where rank 0's receiver would be on this node: its cluster address, loopback only
        # when every node of the Ray is on this host.
        host = reachable_host(started_local_ray=False)
        self.shard = ShardLearner(self.config, self.context, host, keys, actors, credit_budget, self.spaces)
        #: What this rank proves it is one of the job's ranks with (`group.admit_ranks`), under CURVE.
        self.group_secret = group_secret(keys)
        self.thread: threading.Thread | None = None

    def address(self) -> str:
        return self.shard.receiver.address

    def has_gpu(self) -> bool:
        """Whether this rank learns on a GPU (the group is NCCL only when every rank does)."""
        return learner_device(self.config).type == "cuda"

    def node(self) -> str:
        return f"{socket.gethostname()} ({ray.util.get_node_ip_address()})"

    def pid(self) -> int:
        return os.getpid()

    def start(self, group: dict[str, Any], state: dict[str, Any], env_frames: int) -> None:
        """Join the group and train in a thread of this process until rank 0 says stop, from
        rank 0's learner `state` and the run's `env_frames` so far (the learning-rate schedule's)."""
        self.thread = threading.Thread(target=self._run, args=(LearnerGroupSpec(**group), state, env_frames),
                                       name=f"learner-rank-{self.rank}", daemon=True)
        self.thread.start()

    def _run(self, spec: LearnerGroupSpec, state: dict[str, Any], env_frames: int) -> None:
        reducer: TorchDistributedReducer | None = None
        watch: RankZeroWatch | None = None
        try:
            reducer = form_group(spec, self.group_secret)
            watch = RankZeroWatch(reducer.store, self.rank, spec.timeout_seconds)
            self.shard.learner = learner = make_learner(self.config, *self.spaces, reducer=reducer)
            learner.load_state_dict(state)
            while True:
                self.shard.gather(self.share, time.monotonic() + starve_seconds(self.config))
                frames, self.shard.frames = self.shard.frames, 0
                watch.wait()  # rank 0's own work (publish, metrics, checkpoint) may take its time
                agreement = agree(reducer, False, self.shard.pending_steps, frames)
                if agreement.stop:
                    break
                env_frames += agreement.env_frames
                batch = self.shard.take(self.spaces)
                if agreement.total_steps:  # every rank skips alike: no rank trained, no new version
                    learner.update(batch, env_frames)
                reduce_numbers(reducer, self.shard.counters(), *self.shard.take_episodes())
            log.info("learner rank %d: stopped by rank 0 at policy version %d", self.rank, learner.version)
        except RunStalledError as error:  # its own actors: the run's error, not a lost rank
            self._stop(reducer, STALLED, f"learner rank {self.rank}: {error}")
        except RankZeroWaitError as error:
            self._stop(reducer, WAITED, str(error))
        except BaseException as error:
            log.exception("learner rank %d failed", self.rank)
            where = f"; rank 0 was in its {watch.describe()}" if watch is not None else ""
            self._stop(reducer, FAILED, f"learner rank {self.rank}: {_first_line(error)}{where}")

    def _stop(self, reducer: TorchDistributedReducer | None, kind: str, line: str) -> None:
        """Say why in one line (here and in the group's store, for rank 0 to report), then end the
        process: closing its sockets fails the other ranks' collectives at once."""
        log.error("%s; ending its process", line)
        post_stop(reducer.store if reducer is not None else None, self.rank, kind, line)
        os._exit(1)

    def close(self) -> None:
        self.shard.receiver.close()


def plan_shards(config: RunConfig, plan: Any, num_actors: int) -> ShardPlan:
    """The actors' shards for the run's layout: subtrees in a tree, blocks of actors when flat."""
    learners = config.runtime.learners
    if choose_layout(config.runtime.broadcast, plan) == "tree":
        rank_nodes = [rank_node(rank, len(plan.names), config.runtime.learner_placement) for rank in range(learners)]
        return plan_tree(build_tree(plan.names), plan.names, plan.actor_nodes, learners, rank_nodes)
    return plan_flat(num_actors, learners)


def group_secret(keys: JobKeys | None) -> bytes | None:
    """The secret the ranks of a CURVE job prove they hold: the broadcast pair's, which rank 0 and
    the ranks (and relays) serve with, and actors never see."""
    if keys is None or BROADCAST not in keys.serving:
        return None
    return keys.serving[BROADCAST].secret


def rank_config(config: RunConfig, keys: JobKeys | None) -> RunConfig:
    """The config ranks 1.. get: the actors' (message limit resolved), naming the relay folder of
    the keys (the broadcast pair they serve with) instead of the actor folder."""
    if keys is None:
        return config
    runtime = config.runtime.model_copy(update={"key_folder": keys.write_relay_folder()})
    return config.model_copy(update={"runtime": runtime})


def rank_node(rank: int, num_nodes: int, setting: str) -> int:
    """The index of the node rank `rank` runs on: spread, the rank-th node (round the nodes when
    ranks outnumber them); pack, rank 0's node."""
    return rank % num_nodes if setting == "spread" else 0


def placement(node_ids: Sequence[str | None], rank: int, setting: str) -> NodeAffinitySchedulingStrategy | None:
    """Where rank `rank` runs (`rank_node`); anywhere on a local (single-node) Ray."""
    node_id = node_ids[rank_node(rank, len(node_ids), setting)]
    return None if node_id is None else NodeAffinitySchedulingStrategy(node_id, soft=False)


def _wants_gpu(device: str, node_id: str | None) -> bool:
    """Whether a rank on `node_id` (None: anywhere) asks Ray for a GPU: always for
    `runtime.device: cuda`, and for auto where that node (or the cluster) has one."""
    if device != "auto":
        return device == "cuda"
    if node_id is None:
        return ray.cluster_resources().get("GPU", 0) > 0
    return any(node["NodeID"] == node_id and node.get("Resources", {}).get("GPU", 0) > 0 for node in ray.nodes())


def start_ranks(config: RunConfig, node_ids: Sequence[str | None], shards: Any, budget: int,
                batch_steps: int) -> list[Any]:
    """Learner ranks 1..N-1 as Ray actors (no CPU slot: their cores are the learners', which
    `cluster.job` leaves out of the actors' count), never restarted by Ray."""
    tree = config.to_json_dict()
    ranks = []
    for rank in range(1, config.runtime.learners):
        options: dict[str, Any] = {"num_cpus": 0, "max_restarts": 0, "max_task_retries": 0,
                                   "runtime_env": worker_runtime_env()}
        strategy = placement(node_ids, rank, config.runtime.learner_placement)
        if strategy is not None:
            options["scheduling_strategy"] = strategy
        if _wants_gpu(config.runtime.device, strategy.node_id if strategy is not None else None):
            options["num_gpus"] = 1  # Ray hides the GPUs from an actor that asks for none
        ranks.append(ray.remote(LearnerRank).options(**options).remote(
            tree, rank, shards.actors_of(rank), shards.credit_budget(budget, rank), shards.share(batch_steps, rank)))
    return ranks


class LearnerGroup:
    """Rank 0's view of its group: the rank actors, the reducer, and what to say when a rank is lost."""

    def __init__(self, config: RunConfig, ranks: list[Any], host: str, state: dict[str, Any], env_frames: int,
                 keys: JobKeys | None = None) -> None:
        """`state`: rank 0's learner state, which every rank loads before its first update;
        `env_frames`: the run's frames so far (a resumed run's), where every rank's count starts;
        `keys`: the job's, under CURVE (only ranks that hold its broadcast secret are admitted)."""
        self.config = config
        self.ranks = ranks
        replies = answers([rank.node.remote() for rank in ranks] + [rank.address.remote() for rank in ranks],
                          "the learner ranks")
        self.nodes = replies[:len(ranks)]
        self.addresses = replies[len(ranks):]
        port = free_port(host)
        gpus = [learner_device(config).type == "cuda", *answers([rank.has_gpu.remote() for rank in ranks], "the learner ranks")]
        backend = choose_backend(gpus)
        specs = [LearnerGroupSpec(rank, config.runtime.learners, host, port, backend,
                                  config.runtime.learner_timeout_seconds) for rank in range(config.runtime.learners)]
        shared = ray.put(state)
        answers([actor.start.remote(asdict(spec), shared, env_frames) for actor, spec in zip(ranks, specs[1:])],
                "the learner ranks")
        self.reducer = form_group(specs[0], group_secret(keys))
        #: Where rank 0 is, for the other ranks waiting to enter the next agreement.
        self.stages = RankZeroStages(self.reducer.store)
        self._collective_seconds = 0.0
        self.stopped = False

    def take_collective_milliseconds(self) -> float:
        """Milliseconds rank 0 spent in the group's collectives since the last call (waiting for
        the other ranks included): the `learner_collective_ms` metric of an update."""
        seconds = self.reducer.collective_seconds
        taken, self._collective_seconds = seconds - self._collective_seconds, seconds
        return 1000.0 * taken

    def lost(self, error: BaseException) -> LearnerRankLostError | RunStalledError:
        """The error to end the run with after a failed collective: the line of a rank that said why
        it stopped (its own actors stalled: `RunStalledError`, as rank 0's would be), else which
        rank is gone, and where."""
        for rank, (kind, line) in posted_stops(self.reducer.store, len(self.ranks) + 1).items():
            node = self.nodes[rank - 1]
            if kind == STALLED:
                return RunStalledError(f"{line} (on {node})")
            return LearnerRankLostError(f"{line} (on {node})")
        probes = [rank.pid.remote() for rank in self.ranks]
        ready, _ = ray.wait(probes, num_returns=len(probes), timeout=5.0)
        for index, probe in enumerate(probes):
            rank, node = index + 1, self.nodes[index]
            if probe not in ready:
                return LearnerRankLostError(f"learner rank {rank} on {node} stopped answering "
                                            f"(runtime.learner_timeout_seconds={self.config.runtime.learner_timeout_seconds:g}): {error}")
            try:
                ray.get(probe)
            except ray.exceptions.RayError:
                return LearnerRankLostError(f"learner rank {rank} on {node} died: {_first_line(error)}")
        return LearnerRankLostError(f"a collective of the learner group failed: {_first_line(error)}")

    def finish(self) -> None:
        """Tell the other ranks to stop (the stop collective they wait in), once."""
        if self.stopped:
            return
        self.stopped = True
        try:
            self.stages.before_agree()
            agree(self.reducer, True, 0, 0)
        except RuntimeError as error:
            log.warning("learner ranks did not all hear the stop: %s", _first_line(error))



@contextmanager
def serving_joins(publisher: Any, interval_seconds: float = 0.05) -> Iterator[None]:
    """Answer late weight subscribers from a thread while rank 0 waits in the group's collectives.

    Rank 0 serves joins only between messages; in a collective it may wait for a rank whose actors
    cannot sample before they have weights, and would then wait for its whole starve time (an
    actor started or restarted after the last publish). The publisher's socket passes to the
    thread for the collectives and back (the thread is joined) before rank 0 publishes again."""
    stop = threading.Event()

    def serve() -> None:
        while not stop.wait(interval_seconds):
            publisher.serve_joins()

    thread = threading.Thread(target=serve, name="serve-joins", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _first_line(error: BaseException) -> str:
    """The error's first line, without the rendezvous and the transport's own text (gloo's)."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0].split("; group at ")[0]


__all__ = ["LearnerGroup", "LearnerRank", "LearnerRankLostError", "ShardLearner", "start_ranks"]
