"""The distributed trainer: one learner (this process) and N actor processes on Ray.

The learner publishes weights with a version number, takes experience as it arrives and measures
how stale it is (learner version - sampling version, per step). Synchronous sampling keeps only
steps of the current version (RLlib's PPO, staleness 0 at the update and at most 1 counted the
paper's way); asynchronous sampling takes whatever arrives, dropping messages more than
`runtime.max_policy_lag` versions old. Credits (`comm.credits`) keep the experience in flight within
`runtime.batches_in_flight` batches, so the lag stays near one version whatever the number of actors. A dead actor is restarted by Ray; its new process says hello, and the
learner counts the restart.

A multi-agent run (`multiagent:`) is the same loop with a policy dimension: every experience
message names its policy, each trained policy has its own learner, batch, version and staleness
(`policy_learners`), a policy is updated as soon as its batch is full, and one weights message
carries every policy under its own version. Frozen policies are never updated; experience that
names one is refused.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import ray
import torch
import zmq

from ...comm import (
    MEGABYTE,
    ExperienceReceiver,
    JobKeys,
    largest_message_bytes,
    limit_bytes,
    message_limit,
    stop_authenticator,
)
from ...comm.limits import io_threads_for, raise_open_file_limit
from ...config import RunConfig
from ...mdp import ExperienceBatch
from ...rl.data_parallel import empty_experience
from ...storage.join_folder import JoinFolder
from ..algorithms import make_learner, rl_algorithm
from ..learner.actor_watch import ActorWatch
from ..learner.checkpoint import TrainingCheckpoint, TrainingProgress
from ..learner.episodes import RecentEpisodes
from ..learner.intake import ExperienceIntake
from ..learner.lockstep import GATHER, agree, reduce_numbers, update_whole
from ..learner.policy_learners import PolicyLearners, policy_metrics
from ..learner.ranks import LearnerGroup, plan_shards, rank_config, serving_joins, start_ranks, starve_seconds
from ..messages import KINDS, ActorGradients, MessageSpec, concatenate
from ..observers import TrainObserver, TrainResult, UpdateReport
from ..placement.cpu_quota import join_learner_cpu_group
from ..placement.joined_nodes import JoinedNodes, JoinRoutes
from ..placement.process_stats import TreeCpuMeter
from ..placement.ray_actors import init_ray, start_actors
from ..placement.ray_setup import answers, ray_cpus, reachable_host, shutdown_ray
from ..placement.relay_tree import RankRoutes, RelayTree, plan_nodes
from ..placement.shards import ShardPlan
from ..run_shape import (
    POLICY_ID,
    EnvironmentProbe,
    credit_budget,
    message_steps,
    probe_environment,
    steps_per_update,
    with_message_ticks,
)
from .recording import RecordedEpisodes

log = logging.getLogger(__name__)

#: Metrics the distributed runtime reports beside its algorithm's (`algorithms.RLAlgorithm.metric_names`).
RUNTIME_METRICS: tuple[str, ...] = (
    "actor_restarts", "cpu_utilization", "dropped_stale_steps", "malformed_messages",
    "lost_messages", "actors_connected", "hosts_connected", "credits_in_flight", "credits_written_off",
    "credits_late", "credits_reclaimed", "incomplete_batches", "learner_collective_ms",
    "learner_agree_ms", "learner_update_ms", "joined_nodes", "joined_actors",
)
WAIT_CHECK_SECONDS = 1.0


def job_keys(config: RunConfig) -> tuple[RunConfig, JobKeys | None, str | None]:
    """The run's CURVE keys, made fresh for this start, and the config its actors get (which names
    the key folder; the keys themselves never travel). Also the folder to remove at the end when
    it is a temporary one."""
    if config.runtime.transport_security == "none":
        return config, None, None
    folder = config.runtime.key_folder
    own = None
    if folder is None:
        own = folder = tempfile.mkdtemp(prefix="lamarckian-keys-")  # mode 0700
    keys = JobKeys.create(folder)  # the relay folder follows, once the run knows it has relays
    # The actors' config names only the actor folder: no learner or relay secret is in it.
    runtime = config.runtime.model_copy(update={"key_folder": keys.actor_folder})
    return config.model_copy(update={"runtime": runtime}), keys, own


def with_message_limit(config: RunConfig, weights: dict[str, object], spaces: tuple[object, object]) -> RunConfig:
    """The config with `runtime.max_message_megabytes` resolved from the run's largest message
    (`comm.limits`), so that the actors and relays it is given size their sockets alike."""
    steps = config.runtime.rollout_steps * config.env.num_envs
    limit = message_limit(largest_message_bytes(weights, steps, *spaces), config.runtime.max_message_megabytes)
    runtime = config.runtime.model_copy(update={"max_message_megabytes": limit / MEGABYTE})
    return config.model_copy(update={"runtime": runtime})


class _OutOfWallTime(Exception):
    """stop.max_wall_seconds passed while the learner waited for experience."""


class DistributedTrainer(ExperienceIntake):
    def __init__(self, config: RunConfig, observers: Sequence[TrainObserver] = (),
                 probe: EnvironmentProbe | None = None) -> None:
        """`probe`: a single-agent run's spaces (and step time) where the caller has made the
        environment already (`training_run.make_trainer`); otherwise it is made here."""
        self.config = config
        self.observers = list(observers)
        join_learner_cpu_group()
        torch.set_num_threads(config.runtime.torch_threads)
        self.learner: Any
        if config.multiagent is None:
            if probe is None:
                probe = probe_environment(config)
            self.spaces = message_spaces = probe.spaces
            self.learner = make_learner(config, *self.spaces)
            #: The learner of each trained policy; a single-agent run has one, POLICY_ID's.
            self.policy_learners: dict[str, Any] = {POLICY_ID: self.learner}
        else:
            from ..actor.multiagent_sampling import multiagent_spaces

            agents = multiagent_spaces(config)
            # Messages are sized by the flat rows (own observation | global state); the run file's
            # trajectories are declared with what the actors record, the observation's own shape.
            message_spaces = (agents.row_space, agents.action_space)
            self.spaces = (agents.step_space, agents.action_space)
            self.learner = PolicyLearners(config, agents)
            self.policy_learners = dict(self.learner.learners)
        cores = os.cpu_count() or 1
        self.num_actors = config.runtime.num_actors or cores
        #: Actors the messages and credits are sized for: more than the run's own where actor jobs join.
        self.shape_actors = max(self.num_actors, config.runtime.planned_actors or 0)
        # Fan-in: descriptors for every connection (a flat run's two per actor), and ZeroMQ I/O threads for them.
        raise_open_file_limit(2 * self.num_actors)
        self.context = zmq.Context(io_threads=io_threads_for(2 * self.num_actors))
        config, self.keys, self.own_key_folder = job_keys(config)
        config = with_message_limit(with_message_ticks(config, self.shape_actors, probe), self.learner.weights(),
                                    message_spaces)
        self.started_ray = init_ray(config, num_cpus=ray_cpus(config.runtime.num_actors))
        # Actors may run on any node of the Ray cluster: they are given addresses bound on this
        # node's cluster address, which they reach, and never loopback unless the Ray is ours alone.
        host = config.runtime.bind_address or reachable_host(self.started_ray, config.runtime.join_folder is not None)
        self.host = host
        budget = credit_budget(config, self.shape_actors)
        self.message_steps = message_steps(config, self.shape_actors)  # in the run file's /meta
        #: Learner ranks 1.. (Ray actors), the actors' shards, and the group once formed (`train`).
        self.rank_actors: list[Any] = []
        self.shards: ShardPlan | None = None
        self.group: LearnerGroup | None = None
        self.group_counters: dict[str, float] = {}
        self.update_ms = 0.0  # the last update's wall milliseconds (learner_update_ms)
        plan = routes = None
        if config.runtime.learners > 1:
            plan = plan_nodes(config, self.num_actors)
            self.shards = plan_shards(config, plan, self.num_actors)
            self.rank_actors = start_ranks(rank_config(config, self.keys), plan.ray_node_ids, self.shards, budget,
                                           steps_per_update(config))
            routes = RankRoutes(self.shards, tuple(answers([rank.address.remote() for rank in self.rank_actors],
                                                             "the learner ranks")))
            budget = self.shards.credit_budget(budget, 0)
        self.credit_budget = budget  # this learner's (rank 0's); in the run file's /meta
        self.receiver = ExperienceReceiver(self.context, KINDS, host=host, keys=self.keys,
                                           max_message_bytes=limit_bytes(config.runtime.max_message_megabytes),
                                           credit_budget=budget)
        self.tree = RelayTree(config, self.context, self.num_actors, host, self.receiver, self.keys, plan, routes)
        self.publisher = self.tree.publisher
        self.cpu_meter = TreeCpuMeter(cores)
        self.joined: JoinedNodes | None = None  # nodes of actor jobs, once the run's own actors are placed
        self._publish(env_frames=0)
        self.actors = start_actors(config, self.num_actors, self.tree.actor_addresses, self.tree.experience_addresses,
                                   self.tree.actor_scheduling, self.tree.experience_servers,
                                   shape_actors=self.shape_actors)
        if config.runtime.join_folder is not None:
            routes = JoinRoutes(config, self.shape_actors, self.tree.plan.names[0], self.publisher.address,
                                self.receiver.address, self._relay_key_folder,
                                limit_bytes(config.runtime.max_message_megabytes), config.runtime.relay_bundle_ms)
            self.joined = JoinedNodes(JoinFolder(config.runtime.join_folder), routes, self.num_actors,
                                      self._admit_actors, self._release_actors)
        self.watch = ActorWatch(self.num_actors, config.runtime.connect_timeout_seconds,
                                config.runtime.stall_timeout_seconds, self._describe_actors,
                                expected=self.shards.actors_of(0) if self.shards is not None else None)
        gradients = rl_algorithm(config).actor_gradients
        # Observations travel as the sampler saw them (`MultiAgentSpaces.step_space`), as they are recorded.
        self.spec = MessageSpec.of(self.num_actors, self.spaces, self.spaces[0], self.policy_learners,
                                   [p.shape for p in self.learner.model.parameters()] if gradients else None)
        self.malformed_logged: dict[str, float] = {}
        self.hellos: dict[int, int] = {}
        self.actor_pids: dict[int, int] = {}
        self.actor_routes: dict[int, tuple[bytes, ...]] = {}
        self.dropped_stale_steps = 0
        self.env_errors = 0
        self.next_sequence: dict[int, int] = {}  # actor index -> the sequence number expected next
        self.lost_messages = 0
        self.incomplete_batches = 0  # synchronous batches updated on without every share
        self.env_frames = 0
        self.batch_steps = steps_per_update(config)  # per policy
        #: Accepted batches of each trained policy not yet trained on, and their steps.
        self.pending: dict[str, list[ExperienceBatch]] = {policy_id: [] for policy_id in self.policy_learners}
        self.pending_steps = dict.fromkeys(self.policy_learners, 0)
        self.policy_episodes = {policy_id: RecentEpisodes(config.stop.return_window)
                                for policy_id in self.policy_learners}
        self.progress = TrainingProgress(RecentEpisodes(config.stop.return_window))
        self.recorded = {policy_id: RecordedEpisodes(policy_id) for policy_id in self.policy_learners}
        self.last_wait_check = time.monotonic()

    @property
    def actor_restarts(self) -> int:
        return sum(max(0, count - 1) for count in self.hellos.values())

    def _publish(self, env_frames: int) -> None:
        meta = self.learner.broadcast_meta(env_frames)
        if self.config.runtime.sampling == "sync" and self.joined is not None:
            # Each actor's share of a batch among the actors sampling now: a batch completes from
            # the actors there are, as nodes join and leave.
            meta["sync_share"] = math.ceil(self.batch_steps / len(self._sampling_actors()))
        self.publisher.publish(self.learner.version, self.learner.weights(), meta)

    def _serve(self) -> None:
        self.publisher.serve_joins()
        if self.joined is not None:
            self.joined.poll()

    def _relay_key_folder(self) -> str | None:
        return None if self.keys is None else str(self.keys.write_relay_folder())

    def _admit_actors(self, indices: list[int]) -> None:
        """Actors of a joined node are about to start: their messages fit the run's from now on."""
        self.spec = dataclasses.replace(self.spec, num_actors=max(self.spec.num_actors, indices[-1] + 1))

    def _release_actors(self, indices: list[int], how: str) -> None:
        """A joined node left or was lost: its actors' credits return to the pool and they no longer count."""
        for index in indices:
            route = self.actor_routes.pop(index, None)
            if route is not None:
                self.receiver.ledger.close(route)
            self.watch.forget(index)

    def _sampling_actors(self) -> list[int]:
        """The actors sampling now: those that said hello and have not left (before any has, the run's own)."""
        return sorted(self.watch.hosts) or list(range(self.num_actors))

    def _while_waiting(self) -> None:
        """Nothing arrived: at most once a second, end a run out of wall time or one that cannot
        make progress, and let observers that look outside the loop (`on_wait`, e.g. the node
        watch) look now, since no update may come to call them (a lost actor's share of a
        synchronous batch never arrives)."""
        if time.monotonic() - self.last_wait_check < WAIT_CHECK_SECONDS:
            return
        self.last_wait_check = time.monotonic()
        limit = self.config.stop.max_wall_seconds
        if limit is not None and self.progress.wall_time >= limit:
            raise _OutOfWallTime
        self.watch.check()
        for observer in self.observers:
            on_wait = getattr(observer, "on_wait", None)
            if on_wait is not None:
                on_wait(self.learner.version, self.env_frames)

    def _describe_actors(self, indices: Sequence[int]) -> str:
        """Where each of these actors runs, as Ray says, and the addresses it was given."""
        nodes = [self.actors[index].node.remote() for index in indices]
        ready, _ = ray.wait(nodes, num_returns=len(nodes), timeout=5.0)
        parts = []
        for index, reply in zip(indices, nodes):
            where = f"on {ray.get(reply)}" if reply in ready else "not started by Ray (no free CPU on any node?)"
            parts.append(f"actor {index} {where}")
        addresses = sorted({self.tree.actor_addresses[index] for index in indices})
        experience = sorted({self.tree.experience_addresses[index] for index in indices})
        return (f"{'; '.join(parts)}; they were given experience address {', '.join(experience)} "
                f"and weights address {', '.join(addresses)}")

    def _learn_from_experience(self, episodes: RecentEpisodes) -> tuple[dict[str, float], int, int]:
        """Gather experience until a policy's batch is full and update every policy whose batch is;
        returns (metrics, env frames received, steps trained)."""
        frames = 0
        filled_at, contributed = time.monotonic(), {}
        while not (ready := [pid for pid, steps in self.pending_steps.items() if steps >= self.batch_steps]):
            item = self._next_experience()
            if item is None:
                if self._sync_batch_overdue(filled_at):
                    ready = [POLICY_ID]
                    self._complete_sync_batch(contributed, time.monotonic() - filled_at)
                    break
                continue
            frames += item.env_frames
            policy_id = item.policy_id  # one this learner trains (`MessageSpec.policies`)
            learner = self.policy_learners[policy_id]
            # Recorded episodes are numbered as the run counts them (a multi-agent run: per policy).
            first = episodes.count if self.config.multiagent is None else self.policy_episodes[policy_id].count
            self.recorded[policy_id].add(first, item.episode_returns, item.recorded, item.actor_index,
                                         self.watch.hosts.get(item.actor_index, "unknown"))
            episodes.add(item.episode_returns, item.episode_lengths)
            self.policy_episodes[policy_id].add(item.episode_returns, item.episode_lengths)
            if self._accept(item, learner.version):
                self.pending[policy_id].append(item.batch)
                self.pending_steps[policy_id] += len(item.batch)
                filled_at = time.monotonic()
                contributed[item.actor_index] = contributed.get(item.actor_index, 0) + len(item.batch)
        updates, steps = {}, 0
        started = time.monotonic()
        for policy_id in ready:
            batch, self.pending[policy_id], self.pending_steps[policy_id] = concatenate(self.pending[policy_id]), [], 0
            updates[policy_id] = (self.policy_learners[policy_id].update(batch, self.env_frames + frames), len(batch))
            steps += len(batch)
        self.update_ms = 1000.0 * (time.monotonic() - started)
        if self.config.multiagent is None:
            return updates[POLICY_ID][0], frames, steps
        return policy_metrics(updates, self.learner.versions, self.policy_episodes), frames, steps

    def _sync_batch_overdue(self, filled_at: float) -> bool:
        """Synchronous sampling, a batch partly full, and nothing of its version for
        `runtime.sync_fill_seconds`: a share will not come (lost in a relay that died, or its actor
        restarted and samples the next version), and waiting longer would stall the run."""
        return (self.config.runtime.sampling == "sync" and self.config.multiagent is None
                and self.pending_steps[POLICY_ID] > 0
                and time.monotonic() - filled_at > self.config.runtime.sync_fill_seconds)

    def _complete_sync_batch(self, contributed: dict[int, int], waited: float) -> None:
        """Say whose share is missing and give those actors their credits back (what they spent on
        it is not coming), so that they sample the next version at once."""
        live = self._sampling_actors()
        share = math.ceil(self.batch_steps / len(live))
        missing = [index for index in live if contributed.get(index, 0) < share]
        for index in missing:
            if index in self.actor_routes:
                self.receiver.ledger.write_off(self.actor_routes[index], live=True)
        self.incomplete_batches += 1
        log.warning("synchronous batch of version %d completed with %d of %d steps after %.0f s without experience "
                    "(runtime.sync_fill_seconds=%g): short of the shares of actors %s (lost on the way, or "
                    "restarted)",
                    self.learner.version, self.pending_steps[POLICY_ID], self.batch_steps, waited,
                    self.config.runtime.sync_fill_seconds, ", ".join(map(str, missing)) or "none")

    def _learn_from_gradients(self, episodes: RecentEpisodes) -> tuple[dict[str, float], int, int]:
        """Apply the next fresh gradients (A3C); each application is one update."""
        frames = 0
        while True:
            item = self._next_message()
            if not isinstance(item, ActorGradients):
                continue
            frames += item.env_frames
            self.env_errors += item.env_errors
            episodes.add(item.episode_returns, item.episode_lengths)
            limit = self.config.algorithm.max_gradient_staleness  # type: ignore[union-attr]
            if self._fresh(item.policy_version, item.steps, limit):
                metrics = self.learner.apply_gradients(  # type: ignore[attr-defined]
                    item.gradients, self.env_frames + frames)
                metrics.update(item.diagnostics)
                metrics.update(staleness_mean=float(self.learner.version - 1 - item.policy_version),
                               staleness_max=float(self.learner.version - 1 - item.policy_version))
                return metrics, frames, item.steps

    def _form_group(self) -> None:
        """Form the learner group (rank 0 waits here for every rank to join) and give every rank this
        learner's state, so all start from the same weights, optimizer and random state: a fresh
        run's initial ones, or a checkpoint's, whatever number of ranks wrote it."""
        state = self.learner.state_dict()
        self.group = LearnerGroup(self.config, self.rank_actors, self.host, state, self.env_frames, self.keys)
        self.learner = make_learner(self.config, *self.spaces, reducer=self.group.reducer)
        self.learner.load_state_dict(state)
        self.policy_learners = {POLICY_ID: self.learner}

    def _learn_in_group(self, episodes: RecentEpisodes) -> tuple[dict[str, float], int, int]:
        """Gather this rank's share of the batch (for a bounded time), then the update's three
        collectives with the other ranks (`learner.lockstep`); returns the run's metrics, env frames
        and trained steps, summed over the ranks."""
        assert self.group is not None and self.shards is not None
        share = self.shards.share(self.batch_steps, 0)
        self.group.stages.enter(GATHER)
        deadline = time.monotonic() + starve_seconds(self.config)
        frames, returns, lengths = 0, [], []
        while self.pending_steps[POLICY_ID] < share and time.monotonic() < deadline:
            item = self._next_experience()
            if item is None:
                continue
            frames += item.env_frames
            # Rank 0's episodes come first among the ranks' in the reduced list: numbered from here.
            self.recorded[POLICY_ID].add(episodes.count + len(returns), item.episode_returns, item.recorded,
                                         item.actor_index, self.watch.hosts.get(item.actor_index, "unknown"))
            returns.extend(item.episode_returns.tolist())
            lengths.extend(item.episode_lengths.tolist())
            if self._accept(item, self.learner.version):
                self.pending[POLICY_ID].append(item.batch)
                self.pending_steps[POLICY_ID] += len(item.batch)
        pending = self.pending[POLICY_ID]
        batch = concatenate(pending) if pending else empty_experience(*self.spaces)
        try:
            with serving_joins(self.publisher):
                waited = self.group.reducer.collective_seconds
                self.group.stages.before_agree()
                agreement = agree(self.group.reducer, False, self.pending_steps[POLICY_ID], frames)
                agree_ms = 1000.0 * (self.group.reducer.collective_seconds - waited)
                self.pending[POLICY_ID], self.pending_steps[POLICY_ID] = [], 0
                started = time.monotonic()
                metrics: dict[str, float] = {}
                if agreement.total_steps:  # every rank skips alike: no rank trained, no new version
                    metrics = update_whole(self.learner, batch, self.env_frames + agreement.env_frames)
                self.update_ms = 1000.0 * (time.monotonic() - started)
                numbers = reduce_numbers(self.group.reducer, self.counters(), returns, lengths)
        except RuntimeError as error:
            raise self.group.lost(error) from None
        episodes.add(numbers.episode_returns, numbers.episode_lengths)
        # learner_collective_ms: all of the update's collectives; learner_agree_ms: the first, where a
        # rank waits for the others to fill their shares; learner_update_ms: the update itself, its
        # gradients' all-reduces included (rank 0's).
        self.group_counters = {**numbers.counters, "learner_collective_ms": self.group.take_collective_milliseconds(),
                               "learner_agree_ms": agree_ms}
        return metrics, agreement.env_frames, agreement.total_steps

    def _stage(self, name: str) -> None:
        """Tell the other learner ranks which of rank 0's own stages it is in (they wait meanwhile)."""
        if self.group is not None:
            self.group.stages.enter(name)

    def checkpoint(self) -> TrainingCheckpoint:
        self.progress.env_frames = self.env_frames
        return TrainingCheckpoint.of(self.progress, self.learner.state_dict())

    def restore(self, checkpoint: TrainingCheckpoint) -> None:
        """Continue from `checkpoint`; actors get the restored weights with the next broadcast."""
        self.learner.load_state_dict(checkpoint.learner)
        self.progress = checkpoint.progress(self.config.stop.return_window)
        self.env_frames = checkpoint.env_frames
        self._publish(self.env_frames)

    def train(self) -> TrainResult:
        stop, progress = self.config.stop, self.progress
        episodes = progress.episodes
        learn = self._learn_from_gradients if rl_algorithm(self.config).actor_gradients else self._learn_from_experience
        if self.rank_actors and self.group is None:
            self._form_group()
        if self.group is not None:
            learn = self._learn_in_group
        progress.started = time.monotonic()
        frames_at_start = self.env_frames
        while self.env_frames < stop.total_env_steps:
            step_start = time.monotonic()
            try:
                metrics, frames, steps = learn(episodes)
            except _OutOfWallTime:
                break
            self.env_frames += frames
            progress.env_frames = self.env_frames
            if not steps:  # a learner group that held no step: no update, nothing new to publish or report
                continue
            self._stage("publish")
            self._publish(self.env_frames)
            progress.updates += 1
            progress.trained_steps += steps
            elapsed = max(time.monotonic() - step_start, 1e-9)
            metrics.update(episodes.metrics())
            metrics.update(
                env_frames_per_second=frames / elapsed,
                trained_frames_per_second=steps / elapsed,
                actor_restarts=float(self.actor_restarts),
                cpu_utilization=self.cpu_meter.sample(),
                **{name: float(value) for name, value in self.counters().items()},
                incomplete_batches=float(self.incomplete_batches),
                learner_collective_ms=0.0,
                learner_agree_ms=0.0,
                learner_update_ms=self.update_ms,
                joined_nodes=float(len(self.joined.nodes) if self.joined else 0),
                joined_actors=float(self.joined.actors if self.joined else 0),
            )
            metrics.update(self.group_counters)  # the learner group's: every rank's shard
            wall_time = progress.wall_time
            report = UpdateReport(progress.updates, self.env_frames, progress.trained_steps, wall_time,
                                  self.learner.version, episodes.count, episodes.mean_return, metrics,
                                  tuple(record for recorded in self.recorded.values()
                                        for record in recorded.take(self.env_frames, wall_time)))
            if episodes.reached(stop.target_return) and progress.reached_at is None:
                progress.reached_at = self.env_frames
            for observer in self.observers:
                self._stage(getattr(observer, "stage", type(observer).__name__))
                observer.on_update_end(report)
            if episodes.should_stop(stop, report.wall_time):
                break

        if self.group is not None:
            self.group.finish()
        run_seconds = max(time.monotonic() - progress.started, 1e-9)
        result = TrainResult(
            run_path=None, env_frames=self.env_frames, wall_time_seconds=progress.wall_time,
            updates=progress.updates, trained_steps=progress.trained_steps, episodes=episodes.count,
            recent_return_mean=episodes.mean_return, target_reached_at_frames=progress.reached_at,
            sampling_frames_per_second=(self.env_frames - frames_at_start) / run_seconds,
        )
        for observer in self.observers:
            observer.on_train_end(result)
        return result

    def close(self) -> None:
        # The learner's sockets close first, with a linger: libzmq (4.3.5) aborts the process when a
        # connection drops while its socket is torn down part way through a multipart message,
        # which killing the actors and relays at the other end does (comm.channels.CLOSE_LINGER_MS).
        self.receiver.close()
        for rank in self.rank_actors:
            ray.kill(rank, no_restart=True)
        self.rank_actors = []
        self.tree.close()  # closes the publisher, then kills the relays, so Ray must still be up
        if self.joined is not None:
            self.joined.close()
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []
        if self.started_ray:
            shutdown_ray()
        stop_authenticator(self.context)
        self.context.term()
        if self.own_key_folder is not None:
            shutil.rmtree(self.own_key_folder, ignore_errors=True)
