"""The config of `lamarckian-hpc train`: environment, model, RL algorithm, runtime and stop rule."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, computed_field, field_validator, model_validator

from .base import RootSection, Section, StorageConfig
from .multiagent import MultiAgentConfig

#: env.id prefix of a PettingZoo parallel environment: `pettingzoo:<module with parallel_env>`.
PETTINGZOO_PREFIX = "pettingzoo:"
#: env.id prefix of a native MDP of the asynchronous interface: `mdp:<module with make_mdp>`.
NATIVE_MDP_PREFIX = "mdp:"
MULTIAGENT_ENV_IDS = ("pettingzoo:<module> (a PettingZoo parallel environment, e.g. pettingzoo:mpe2.simple_spread_v3) "
                      "or mdp:<module> (a native asynchronous MDP, e.g. mdp:lamarckian_hpc.envs.async_arena)")


class EnvConfig(Section):
    id: str = Field("CartPole-v1", min_length=1, description=(
        "Gymnasium environment id, or pettingzoo:<module> for a PettingZoo parallel environment (the module's "
        "parallel_env(**kwargs), e.g. pettingzoo:mpe2.simple_spread_v3), or mdp:<module> for a native "
        "asynchronous MDP (the module's make_mdp(**kwargs), e.g. mdp:lamarckian_hpc.envs.async_arena); "
        "the last two need a multiagent section)."))
    num_envs: int = Field(8, ge=1, le=4096, description="Environments stepped together in one process.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description=(
        "Keyword arguments for gymnasium.make (or the PettingZoo module's parallel_env, or the MDP module's "
        "make_mdp)."))
    max_episode_steps: int | None = Field(None, ge=1, description="Episode step limit (the env's own when unset).")


class ModelConfig(Section):
    kind: Literal["mlp", "cnn"] = Field("mlp", description="mlp for vector observations, cnn for images.")
    cnn_layers: Literal["table3", "nature"] = Field(
        "table3", description="The CNN's layers: table3 is the paper's (ConvK4S2) x 4 then FC(256); nature is "
        "DQN's ConvK8S4, ConvK4S2, ConvK3S1, FC(512), about a third of the arithmetic per frame.")
    cnn_precision: Literal["float32", "bfloat16"] = Field(
        "float32", description="What the CNN's convolutions and dense layer compute in, in the learner and in "
        "the actors: bfloat16 runs them under torch.autocast, with the weights, the optimizer and the heads in "
        "float32; 1.5-2x the learner's speed on CPUs with AVX-512 BF16, possibly slower than float32 on CPUs "
        "without (not measured here).")
    policy_hidden_sizes: tuple[int, ...] = Field(
        (256, 128), min_length=1, description="Policy layers; the critic is built on top of them."
    )
    critic_hidden_sizes: tuple[int, ...] = Field(
        (128, 64), description="Critic layers added on top of the shared policy layers."
    )
    share_trunk: bool = Field(True, description="Critic reuses the policy layers (paper Table III).")
    activation: Literal["leaky_relu", "tanh", "relu"] = Field("leaky_relu", description="Hidden activation.")
    initial_log_std: float = Field(0.0, ge=-5, le=2, description="Initial log std of continuous actions.")

    @model_validator(mode="after")
    def _positive_sizes(self) -> ModelConfig:
        for name in ("policy_hidden_sizes", "critic_hidden_sizes"):
            if any(size < 1 for size in getattr(self, name)):
                raise ValueError(f"{name}: every layer size must be >= 1")
        return self


class _BatchAlgorithm(Section):
    """Fields every algorithm that learns from batches of experience shares."""

    batch_size: int = Field(8192, ge=2, description="Env frames collected per update.")
    num_epochs: int = Field(1, ge=1, le=100, description="Passes over each batch (batch reuse).")
    num_minibatches: int = Field(4, ge=1, description="Minibatches per epoch.")
    learning_rate: float = Field(3e-4, gt=0, le=1, description="Adam step size.")
    anneal_learning_rate: bool = Field(False, description="Decay the step size linearly to 0 over the run.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    reward_scale: float = Field(1.0, gt=0, description="Rewards are multiplied by this before learning.")
    value_weight: float = Field(0.5, ge=0, description="Weight of the critic loss.")
    entropy_weight: float = Field(0.01, ge=0, description="Weight of the entropy bonus.")
    max_grad_norm: float = Field(0.5, gt=0, description="Gradient clipping norm.")

    @model_validator(mode="before")
    @classmethod
    def _accept_derived_fields(cls, data: Any) -> Any:
        """A stored config carries the derived minibatch_size; accept it back when it agrees."""
        if isinstance(data, dict) and "minibatch_size" in data:
            data = dict(data)
            given = data.pop("minibatch_size")
            derived = cls.model_validate(data).minibatch_size
            if given != derived:
                raise ValueError(f"minibatch_size is derived (batch_size // num_minibatches = {derived}), got {given}")
        return data

    @computed_field(description="Derived: batch_size // num_minibatches. It cannot be set; a stored config "  # type: ignore[prop-decorator]
                                "that carries it loads when it agrees.")
    @property
    def minibatch_size(self) -> int:
        return max(1, self.batch_size // self.num_minibatches)

    @model_validator(mode="after")
    def _minibatches_fit(self) -> _BatchAlgorithm:
        if self.num_minibatches > self.batch_size:
            raise ValueError(f"num_minibatches ({self.num_minibatches}) exceeds batch_size ({self.batch_size})")
        return self


class PPOConfig(_BatchAlgorithm):
    name: Literal["ppo"] = Field("ppo", description="Algorithm: ppo, impala, a3c, dqn or sac.")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    clip_range: float = Field(0.2, gt=0, lt=1, description="Probability-ratio clip of the surrogate loss.")
    policy_weight: float = Field(1.0, ge=0, description="Weight of the policy loss.")
    normalize_advantages: bool = Field(True, description="Normalize advantages per minibatch.")


class ImpalaConfig(_BatchAlgorithm):
    name: Literal["impala"] = Field(
        "impala", description="Algorithm: actor-critic with V-trace targets, which correct for stale samples.")
    rho_bar: float = Field(1.0, gt=0, description="V-trace clip of the importance weight in the targets.")
    c_bar: float = Field(1.0, gt=0, description="V-trace clip of the trace-cutting coefficients.")
    policy_weight: float = Field(1.0, ge=0, description="Weight of the policy loss.")


class A3CConfig(Section):
    name: Literal["a3c"] = Field(
        "a3c", description="Algorithm: actors compute advantage actor-critic gradients on their own rollouts and "
                           "the learner applies them; needs actor processes (runtime.mode=ray).")
    learning_rate: float = Field(1e-3, gt=0, le=1, description="Adam step size of the learner.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE lambda of the actors' advantage estimates.")
    reward_scale: float = Field(1.0, gt=0, description="Rewards are multiplied by this before learning.")
    value_weight: float = Field(0.5, ge=0, description="Weight of the critic loss.")
    entropy_weight: float = Field(0.01, ge=0, description="Weight of the entropy bonus.")
    max_grad_norm: float = Field(0.5, gt=0, description="Gradient clipping norm (actor side).")
    max_gradient_staleness: int = Field(4, ge=0, description="Gradients from older weights are dropped.")


class DQNConfig(Section):
    name: Literal["dqn"] = Field(
        "dqn", description="Algorithm: replay buffer, target network, double Q; actors act epsilon-greedily with "
                           "the schedule the learner broadcasts.")
    learning_rate: float = Field(5e-4, gt=0, le=1, description="Adam step size.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    reward_scale: float = Field(1.0, gt=0, description="Rewards are multiplied by this before learning.")
    replay_capacity: int = Field(100_000, ge=100, description="Transitions kept in the replay buffer.")
    learning_starts: int = Field(2_000, ge=1, description="Transitions in the buffer before learning starts.")
    minibatch_size: int = Field(128, ge=1, description="Transitions per gradient step.")
    updates_per_frame: float = Field(0.25, gt=0, le=16, description="Gradient steps per new env frame.")
    target_update_interval: int = Field(500, ge=1, description="Gradient steps between target-network copies.")
    epsilon_start: float = Field(1.0, ge=0, le=1, description="Exploration rate at the start.")
    epsilon_end: float = Field(0.02, ge=0, le=1, description="Exploration rate after the decay.")
    epsilon_decay_frames: int = Field(20_000, ge=1, description="Env frames over which epsilon decays linearly.")
    double_q: bool = Field(True, description="Double DQN targets.")
    max_grad_norm: float = Field(10.0, gt=0, description="Gradient clipping norm.")


class SACConfig(Section):
    name: Literal["sac"] = Field(
        "sac", description="Algorithm: Soft Actor-Critic for continuous (Box) actions: a squashed Gaussian policy, "
                           "twin Q-networks with Polyak-averaged targets and a tuned entropy temperature; the model's "
                           "policy_hidden_sizes are the actor's layers, critic_hidden_sizes each Q-network's.")
    learning_rate: float = Field(3e-4, gt=0, le=1, description="Adam step size of the policy.")
    q_learning_rate: float = Field(1e-3, gt=0, le=1, description="Adam step size of the Q-networks and of alpha.")
    gamma: float = Field(0.99, ge=0, le=1, description="Discount factor.")
    tau: float = Field(0.005, gt=0, le=1, description="Polyak step of the target Q-networks per gradient step.")
    reward_scale: float = Field(1.0, gt=0, description="Rewards are multiplied by this before learning.")
    replay_capacity: int = Field(1_000_000, ge=100, description="Transitions kept in the replay buffer.")
    learning_starts: int = Field(5_000, ge=1, description=(
        "Transitions in the buffer before learning starts; until then actors act uniformly at random."))
    minibatch_size: int = Field(256, ge=1, description="Transitions per gradient step.")
    updates_per_frame: float = Field(1.0, gt=0, le=16, description="Q-network gradient steps per new env frame.")
    policy_update_interval: int = Field(2, ge=1, description=(
        "Delayed policy updates: every this many Q steps, this many policy (and alpha) steps."))
    autotune_entropy: bool = Field(True, description="Tune alpha so the policy's entropy tracks target_entropy.")
    initial_alpha: float = Field(0.2, gt=0, description="Entropy temperature at the start (fixed when not autotuned).")
    target_entropy: float | None = Field(None, description="Entropy target of the autotuning; default -action size.")
    max_grad_norm: float | None = Field(None, gt=0, description="Gradient clipping norm; null: no clipping.")


AlgorithmConfig = Annotated[PPOConfig | ImpalaConfig | A3CConfig | DQNConfig | SACConfig, Field(discriminator="name")]
ALGORITHMS: dict[str, type[BaseModel]] = {"ppo": PPOConfig, "impala": ImpalaConfig, "a3c": A3CConfig,
                                          "dqn": DQNConfig, "sac": SACConfig}
#: The algorithms whose learner can run as several ranks (runtime.learners > 1).
DATA_PARALLEL_ALGORITHMS: tuple[str, ...] = ("ppo", "impala")


class RuntimeConfig(Section):
    mode: Literal["ray", "serial"] = Field(
        "ray", description="ray: a learner and actor processes on (local) Ray; serial: all in this process."
    )
    sampling: Literal["async", "sync"] = Field(
        "async", description="async: actors never wait for the learner; sync: each batch from the current policy."
    )
    num_actors: int | None = Field(None, ge=1, le=100_000, description="Actor processes; default one per core.")
    rollout_steps: int = Field(32, ge=1, description="Ticks an actor samples per message it sends, at most.")
    message_ticks: int | None = Field(
        None, ge=1, le=1_000_000,
        description="Ticks an actor samples per message (at most runtime.rollout_steps). Default: its share of a "
                    "batch in asynchronous sampling, raised to about 20 ms of sampling where the environment is "
                    "fast (timed on the learner's node at start; the run file's /meta records message_steps): every "
                    "message costs its actor, the relays and the learner the same work however few steps it "
                    "carries.")
    max_policy_lag: int | None = Field(
        4, ge=0, le=1_000_000,
        description="Drop samples more than this many policy versions older than the learner's, counted in the "
                    "dropped_stale_steps metric; null keeps every sample. Flow control keeps the lag near 1, so "
                    "this only catches stragglers (an actor whose host paused).")
    batches_in_flight: float = Field(
        1.0, gt=0, le=64,
        description="Experience allowed in flight (being sampled, in relays, queued at the learner) in batches: "
                    "the learner grants actors that many batches' worth of credits, one per message, so policy "
                    "lag stays bounded whatever the number of actors (about this many versions). With more "
                    "actors than credits, actors wait in turn: the learner is then the ceiling.")
    relay_bundle_ms: float = Field(
        3.0, ge=0, le=1000,
        description="How long a relay gathers the experience coming up before it sends it on as one message "
                    "(at most 1 MiB; the learner then pays its per-message cost once per relay batch, not once "
                    "per rollout); 0 forwards message by message.")
    ray_address: str | None = Field(None, description="Join this Ray cluster; default starts a local one.")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Learner device. auto takes a GPU if present for a CNN, PPO or IMPALA learner (their "
                            "minibatch steps replay as CUDA graphs there) and the CPU's threads for other MLP "
                            "learners; the run file's /meta (learner_device) says which and why.")
    torch_threads: int = Field(1, ge=1, le=256, description="Torch intra-op threads of the learner process.")
    broadcast: Literal["auto", "flat", "tree"] = Field(
        "auto", description="How weights go down and experience comes up. flat: every actor connects to the learner; "
                            "tree: through one relay per node (the learner holds one connection per relay it "
                            "feeds); auto: the tree when the run's actors are on more than one host, flat on one."
    )
    simulated_nodes: int | None = Field(
        None, ge=1, le=100_000,
        description="Group the actors into this many simulated nodes on one host (tests and benchmarks of the tree).",
    )
    transport_security: Literal["curve", "none"] = Field(
        "curve", description="curve: encrypt every socket and admit only this job's processes; none: plain."
    )
    key_folder: Path | None = Field(
        None, description="Folder for the job's keys, shared by all its nodes; default a private temp folder.")
    max_message_megabytes: float | None = Field(
        None, ge=1, le=1024,
        description="Largest frame a socket of the run accepts from a peer, in MiB (ZeroMQ's ZMQ_MAXMSGSIZE, "
                    "checked before any key is presented: a peer declaring more is dropped). Default 4 times the "
                    "run's largest message (its weights or one rollout), at least 4 MiB.")
    join_folder: Path | None = Field(
        None, description="The run's join folder, where actor jobs find a running run (the Ray head's address "
                          "and the cluster's token, in private files) and say when they leave; a Slurm launch "
                          "sets it beside the run file. With it, the learner places actors on every node that "
                          "joins the run's cluster and lets them go when they leave; null: the nodes are fixed.")
    planned_actors: int | None = Field(
        None, ge=1, le=1_000_000,
        description="Actors the run's messages and credits are sized for (their share of a batch, the credit "
                    "budget) where actor jobs will join it: a launch with actor jobs sets it to the actors of "
                    "all its jobs. Default runtime.num_actors.")
    on_node_loss: Literal["fail", "continue"] = Field(
        "fail", description="When a node of a multi-node run is lost: fail stops with an error naming it, "
                            "checkpoint saved for a resume; continue trains on with the actors of the nodes left.")
    node_loss_seconds: float = Field(
        30.0, ge=5, le=3600,
        description="How long a node of a Slurm job may stay silent (a frozen host, a cut link) before the run "
                    "counts it lost and does what runtime.on_node_loss says; a shorter silence is ridden through. "
                    "Ray's own default is about 15 s. Longer rides through longer cuts, and notices a dead node "
                    "that much later.")
    bind_address: str | None = Field(
        None, description="The learner's address that actors and relays on other hosts connect to; default this "
                          "node's address in the Ray cluster (loopback for the run's own local Ray). Set it on nodes "
                          "with several networks to pick the one the other nodes reach.")
    max_consecutive_env_errors: int = Field(
        100, ge=1, le=1_000_000,
        description="Episodes in a row that may end in an environment error before sampling stops: an actor "
                    "then reports the error and waits, and the run ends (exit 1, naming the error) once no actor "
                    "can sample.")
    connect_timeout_seconds: float = Field(
        180.0, gt=0, le=86_400,
        description="End the run (exit 1, naming them) when actors have not said hello this long after they were "
                    "started: an address they cannot reach, or no free CPU for them.")
    sync_fill_seconds: float = Field(
        30.0, gt=0, le=86_400,
        description="runtime.sampling=sync: when no experience of the current version has arrived for this long "
                    "and the batch is partly full (a share lost with a relay, an actor restarted), update on what "
                    "arrived, say whose share is missing, and give those actors their credits back.")
    stall_timeout_seconds: float = Field(
        300.0, gt=0, le=86_400,
        description="End the run (exit 1) when no experience has arrived for this long once every actor connected.")
    learners: int = Field(
        1, ge=1, le=1024,
        description="Learner processes (ranks) of the policy. Each takes the experience of its own part of the "
                    "actors; together they make, at every update, the update one learner would make with all "
                    "their steps (gradients summed over ranks, global advantage normalization), in one "
                    "torch.distributed group (gloo on CPUs, NCCL when every rank has a GPU). ppo and impala; "
                    "single-policy runs on actor processes (runtime.mode=ray).")
    learner_placement: Literal["spread", "pack"] = Field(
        "spread", description="Where the learner ranks go: spread puts one on each node; pack puts several on a "
                              "node (a node with several GPUs).")
    learner_timeout_seconds: float = Field(
        120.0, gt=0, le=86_400,
        description="Timeout of the learner ranks' rendezvous and of every collective: a rank that does not "
                    "join or answer within it stops the run with an error naming it.")

    @field_validator("bind_address")
    @classmethod
    def _one_interface(cls, address: str | None) -> str | None:
        if address is None:
            return None
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            raise ValueError(f"must be an IP address, got {address!r}") from None
        if parsed.is_unspecified:
            raise ValueError(f"must name one interface, not {address} (every interface of a shared node)")
        return address

    @model_validator(mode="after")
    def _continue_needs_async(self) -> RuntimeConfig:
        if self.on_node_loss == "continue" and self.sampling == "sync":
            raise ValueError("on_node_loss: continue needs sampling=async (in sync sampling every actor sends "
                             "a fixed share of each batch, so the lost actors' shares would be waited for ever)")
        return self


class StopConfig(Section):
    total_env_steps: int = Field(300_000, ge=1, description="Env frames after which training stops.")
    target_return: float | None = Field(None, description="Stop early once the recent mean return reaches this.")
    return_window: int = Field(20, ge=1, description="Episodes in the recent mean return.")
    max_wall_seconds: float | None = Field(None, gt=0, description="Stop after this much training wall time.")


class RunConfig(RootSection):
    seed: int = Field(0, ge=0, description="Seed of every random generator of the run.")
    env: EnvConfig = Field(default_factory=EnvConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = Field(default_factory=PPOConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    stop: StopConfig = Field(default_factory=StopConfig)
    multiagent: MultiAgentConfig | None = Field(
        None, description="Several policies over the agents of a PettingZoo environment (null: single-agent).")

    @model_validator(mode="after")
    def _multiagent_fits(self) -> RunConfig:
        """What a multi-agent run needs of the other sections; one clause naming the field at fault."""
        prefix = next((p for p in (PETTINGZOO_PREFIX, NATIVE_MDP_PREFIX) if self.env.id.startswith(p)), None)
        if self.multiagent is None:
            if prefix is not None:
                kind = "a PettingZoo environment" if prefix == PETTINGZOO_PREFIX else "a multi-agent MDP"
                raise ValueError(f"env.id: {self.env.id!r} is {kind}; it needs a multiagent section "
                                 "(multiagent.policies, ...)")
            return self
        module = self.env.id.removeprefix(prefix or "")
        problems = []
        if prefix is None or not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", module):
            problems.append(f"env.id: multiagent training needs {MULTIAGENT_ENV_IDS}, got {self.env.id!r}")
        if self.algorithm.name != "ppo":
            problems.append(f"algorithm.name: multiagent training runs ppo, got {self.algorithm.name!r}")
        if self.runtime.mode != "ray":
            problems.append("runtime.mode: multiagent training from a config runs on actor processes (ray); "
                            "MultiAgentTrainer is the serial trainer, from Python")
        if self.runtime.sampling != "async":
            problems.append("runtime.sampling: multiagent training needs async (policies fill their batches at "
                            "their own pace, so no actor can wait for every one)")
        if self.env.max_episode_steps is not None:
            problems.append("env.max_episode_steps: not applied to multi-agent environments; set the env's own "
                            "limit in env.kwargs (max_cycles for mpe2, max_ticks for the arena)")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _learner_ranks_fit(self) -> RunConfig:
        """What several learner ranks need; one clause naming the field at fault."""
        learners = self.runtime.learners
        if learners == 1:
            return self
        if self.algorithm.name not in DATA_PARALLEL_ALGORITHMS:
            raise ValueError(f"runtime.learners: {learners} learner ranks learn with "
                             f"{' or '.join(DATA_PARALLEL_ALGORITHMS)}; algorithm.name {self.algorithm.name!r} "
                             "learns on one (runtime.learners: 1)")
        if self.multiagent is not None:
            raise ValueError(f"runtime.learners: {learners} learner ranks train one policy; a multiagent run "
                             "takes runtime.learners: 1")
        if self.runtime.mode != "ray":
            raise ValueError(f"runtime.learners: {learners} learner ranks are processes of runtime.mode=ray, "
                             f"not {self.runtime.mode}")
        if self.runtime.on_node_loss == "continue":
            # A lost rank cannot be replaced or left out: a torch.distributed group has a fixed size.
            raise ValueError(f"runtime.on_node_loss: continue cannot be honoured with runtime.learners: {learners} "
                             "(a learner group cannot go on without a lost rank); take runtime.on_node_loss: fail "
                             "(stop with a checkpoint, resume on the nodes left) or runtime.learners: 1")
        return self

    @model_validator(mode="before")
    @classmethod
    def _default_algorithm(cls, data: Any) -> Any:
        """An algorithm section without a name is PPO's (the discriminated union needs the tag)."""
        if isinstance(data, dict) and isinstance(data.get("algorithm"), dict) and "name" not in data["algorithm"]:
            data = {**data, "algorithm": {"name": "ppo", **data["algorithm"]}}
        return data
