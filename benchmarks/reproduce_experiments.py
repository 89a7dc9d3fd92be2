"""The experiments `benchmarks/reproduce.py` runs: for each, what it measures, the paper's figure or
table and reported value, where this machine's scale differs, and its command at every scale."""

from __future__ import annotations

from dataclasses import dataclass

from reproduce_headlines import READERS  # this script's folder is first on sys.path

SCALES = ("small", "medium", "large")


@dataclass(frozen=True)
class Experiment:
    """One experiment: what it measures, what the paper reports for it, and its command at each scale."""

    name: str
    measures: str  # what this experiment measures here
    paper: str  # the paper's figure or table, numbered as the paper numbers them
    paper_value: str  # what the paper reports there, short
    differs: str  # where this scale differs from the paper's ({cores}: this machine's cores)
    commands: dict[str, list[str]]
    result: str  # what it writes, relative to OUT: the summary reader reads it
    reader: str  # which summary reader (a key of READERS)
    peer: bool = False  # a peer comparison: runs with --peer-python, needs ray.rllib
    needs: tuple[str, ...] = ()  # other modules its interpreter must import (an environment's extra)
    after: tuple[str, ...] = ()  # experiments whose results it reads (run after them; --final in an array)

    def __post_init__(self) -> None:
        if self.reader not in READERS:
            raise ValueError(f"{self.name}: no summary reader {self.reader!r}; known: {sorted(READERS)}")


def _train(config: str, name: str, *overrides: str) -> list[str]:
    return ["lamarckian-hpc", "train", f"configs/{config}", *overrides, "storage.directory={out}/runs",
            f"storage.run_name={name}"]


def _evolve(config: str, name: str, *overrides: str) -> list[str]:
    return ["lamarckian-hpc", "evolve", f"configs/{config}", *overrides, "storage.directory={out}/runs",
            f"storage.run_name={name}"]


def _scaled(small: list[str], medium: list[str], large: list[str]) -> dict[str, list[str]]:
    return {"small": small, "medium": medium, "large": large}


def _bench(script: str, name: str, *arguments: str) -> list[str]:
    return ["python", f"benchmarks/{script}.py", *arguments, "--output", f"{{out}}/{name}.json"]


def _ppo_actors(actors: int, broadcast: str, frames: int) -> list[str]:
    name = f"ppo_cartpole_{broadcast}_{actors}actors"
    return _train("ppo_cartpole.yaml", name, f"runtime.num_actors={actors}", f"runtime.broadcast={broadcast}",
                  *(["runtime.simulated_nodes=2"] if broadcast == "tree" else []), f"stop.total_env_steps={frames}",
                  "stop.target_return=null", "storage.metrics_interval_seconds=1")


FIG7_VALUE = ("Pendulum: 10k samples/s on 10 cores, about 2, 4, 8, 15x on 20, 40, 80, 160 cores; Image Pong "
              "CPU use 32.2% on 10 cores, 96.8% on 40 (Table IV)")
FIG7D_VALUE = ("flat broadcast (Lamarckian*): staleness rises sharply with the cores; tree: larger only from 4000 "
               "cores; RLlib (synchronous): 1 (plot only, no numbers)")


def _actors_experiment(actors: int, broadcast: str = "flat") -> Experiment:
    name = f"ppo_cartpole_{broadcast}_{actors}actors"
    if broadcast == "tree":
        return Experiment(
            name, "PPO with the relay tree over 2 simulated nodes: staleness and throughput beside flat",
            "Fig. 7d, Fig. 8 (Lamarckian vs Lamarckian*)", FIG7D_VALUE + "; tree trains better per frame (Fig. 8)",
            "2 actors on 2 nodes simulated on one machine of {cores} cores, CartPole-v1 (paper: Gfootball, "
            "2000-6000 cores on 40-core nodes)",
            _scaled(_ppo_actors(actors, broadcast, 30_000), _ppo_actors(actors, broadcast, 200_000),
                    _ppo_actors(actors, broadcast, 1_000_000)), f"runs/{name}.h5", "train")
    return Experiment(
        name, f"PPO throughput, staleness and CPU use with {actors} actor process{'es' if actors > 1 else ''}",
        "Fig. 7a-b, Table IV", FIG7_VALUE,
        f"CartPole-v1, {actors} actor{'s' if actors > 1 else ''} on {{cores}} cores, learner on the CPU (paper: "
        "Pendulum and Image Pong on 10-160 cores)",
        _scaled(_ppo_actors(actors, broadcast, 30_000), _ppo_actors(actors, broadcast, 200_000),
                _ppo_actors(actors, broadcast, 1_000_000)), f"runs/{name}.h5", "train")


def _league(updates: int) -> list[str]:
    return ["python", "benchmarks/reproduce.py", "--league-run", "{out}/runs/league_rps.h5", "--updates", str(updates)]


EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        "ppo_cartpole_serial", "PPO learning curve against frames and wall time, one process",
        "Fig. 8", "Gfootball PPO, 150M frames: Lamarckian trains about twice as fast as RLlib on 6000 cores",
        "CartPole-v1 to a mean return of 475, one process on {cores} cores (paper: Gfootball, 2000-6000 cores)",
        _scaled(_train("ppo_cartpole.yaml", "ppo_cartpole_serial", "runtime.mode=serial", "stop.total_env_steps=40000"),
                _train("ppo_cartpole.yaml", "ppo_cartpole_serial", "runtime.mode=serial"),
                _train("ppo_cartpole.yaml", "ppo_cartpole_serial", "runtime.mode=serial")),
        "runs/ppo_cartpole_serial.h5", "train"),
    _actors_experiment(1), _actors_experiment(2), _actors_experiment(2, "tree"), _actors_experiment(4),
    Experiment(
        "nsga2_zdt1", "NSGA-II Pareto front, lineage and hypervolume on ZDT1",
        "Fig. 11b", "NSGA-II three-objective game balancing (Rise to War): a Pareto set approximation, f2 > 2 "
        "imbalanced; about ten minutes per balancing loop (no front numbers)",
        "ZDT1 (2 objectives) instead of the commercial game's simulator, which is not public",
        _scaled(_evolve("nsga2_zdt1.yaml", "nsga2_zdt1", "runtime.mode=serial", "algorithm.generations=100"),
                _evolve("nsga2_zdt1.yaml", "nsga2_zdt1"), _evolve("nsga2_zdt1.yaml", "nsga2_zdt1")),
        "runs/nsga2_zdt1.h5", "nsga2"),
    Experiment(
        "pbt_ppo_cartpole", "PBT+PPO: best member, lineage and hyperparameters over time",
        "Fig. 9", "vector Pong PBT+PPO, 1G frames: 13x faster than RLlib on 6000 cores, competitive scores",
        "CartPole-v1, population 4, {cores} cores (paper: vector Pong, 2000-6000 cores)",
        _scaled(_evolve("pbt_ppo_cartpole.yaml", "pbt_ppo_cartpole", "runtime.mode=serial",
                        "algorithm.population_size=4", "algorithm.interval_env_frames=1024", "stop.total_env_frames=4096", "ppo.num_epochs=4"),
                _evolve("pbt_ppo_cartpole.yaml", "pbt_ppo_cartpole", "stop.total_env_frames=100000"),
                _evolve("pbt_ppo_cartpole.yaml", "pbt_ppo_cartpole")),
        "runs/pbt_ppo_cartpole.h5", "pbt"),
    Experiment(
        "emogi_pong", "EMOGI front: normalized score + activeness against score + laziness",
        "Fig. 10", "Pong agents of different activeness and laziness at similar normalized scores; corner agents "
        "less competitive (plot only, no numbers)",
        "the built-in vector Pong (5 points a game) on {cores} cores (paper: Atari Pong)",
        _scaled(_evolve("emogi_pong.yaml", "emogi_pong", "runtime.mode=serial", "algorithm.population_size=4",
                        "algorithm.generations=2", "algorithm.initial_env_frames=4096",
                        "algorithm.offspring_env_frames=2048", "algorithm.evaluation_episodes=2",
                        "ppo.batch_size=1024"),
                _evolve("emogi_pong.yaml", "emogi_pong", "algorithm.generations=2"),
                _evolve("emogi_pong.yaml", "emogi_pong")),
        "runs/emogi_pong.h5", "emogi"),
    Experiment(
        "league_rps", "league: payoff matrix, Elo over time, the main agent's exploitability",
        "none (not in the paper)", "-", "biased rock-paper-scissors, a matrix game: no environment to scale",
        _scaled(_league(600), _league(3000), _league(3000)), "runs/league_rps.h5", "league"),
    Experiment(
        "sampling", "sampling throughput against actor processes, with cheap updates (benchmark)",
        "Fig. 7a", "10k samples/s on 10 cores (Pendulum); about 2, 4, 8, 15x on 20, 40, 80, 160 cores",
        "CartPole-v1, 1-2 actor processes on {cores} cores (paper: Pendulum, 10-160 cores)",
        _scaled(_bench("sampling", "sampling", "--actors", "1", "2", "--envs", "CartPole-v1", "--frames", "20000",
                       "--raw-frames", "10000"),
                _bench("sampling", "sampling"),
                _bench("sampling", "sampling", "--actors", "1", "2", "4", "8", "16", "32")),
        "sampling.json", "sampling"),
    Experiment(
        "raw_bound", "trainer sampling against this machine's raw bound (envs and inference, no learning)",
        "none (not in the paper)", "-", "a property of this machine ({cores} cores)",
        _scaled(_bench("raw_bound", "raw_bound", "--frames", "10000", "--repeats", "1"),
                _bench("raw_bound", "raw_bound"), _bench("raw_bound", "raw_bound")),
        "raw_bound.json", "raw_bound"),
    Experiment(
        "nsga2_vs_pymoo", "our NSGA-II against pymoo's: hypervolume and time per generation on ZDT",
        "none (the NSGA-II of Fig. 11b; no pymoo comparison in the paper)", "-",
        "ZDT problems on {cores} cores; fewer seeds at small scale",
        _scaled(_bench("nsga2_vs_pymoo", "nsga2_vs_pymoo", "--seeds", "1"),
                _bench("nsga2_vs_pymoo", "nsga2_vs_pymoo"), _bench("nsga2_vs_pymoo", "nsga2_vs_pymoo")),
        "nsga2_vs_pymoo.json", "nsga2_vs_pymoo"),
    Experiment(
        "vs_rllib", "ours against RLlib's PPO in the same run: env steps/s, CPU use, memory, time to 475",
        "Table IV; Figs. 7c, 8 (abstract)", "CPU use 32.2% vs RLlib's 10.7% on 10 cores, 96.8% vs 23.9% on 40 "
        "(Image Pong); sampling and training about 2x RLlib's on Gfootball",
        "CartPole-v1 (with Pendulum-v1 above small), 2 env workers on {cores} cores (paper: Image Pong on 10-160 "
        "cores, Gfootball on 2000-6000)",
        _scaled(_bench("vs_rllib", "vs_rllib", "--envs", "CartPole-v1", "--max-seconds", "60", "--raw-frames", "50000"),
                _bench("vs_rllib", "vs_rllib"), _bench("vs_rllib", "vs_rllib", "--repeats", "3")),
        "vs_rllib.json", "vs_rllib", peer=True),
    Experiment(
        "vs_rllib_pong_image", "ours against RLlib's PPO on image Pong, Table III's CNN on both sides: env steps/s "
        "sampled and trained, CPU use of the cores, memory",
        "Table IV; Fig. 7b", "CPU use 32.2% vs RLlib's 10.7% on 10 cores, 96.8% vs 23.9% on 40 (Image Pong)",
        "ALE Pong from pixels, 2 env workers x 8 envs on {cores} cores, the CNN learner on one CPU thread (paper: "
        "10-160 cores, an A100 learner)",
        _scaled(_bench("vs_rllib", "vs_rllib_pong_image", "--envs", "lamarckian/PongImage-v0", "--max-seconds", "150"),
                _bench("vs_rllib", "vs_rllib_pong_image", "--envs", "lamarckian/PongImage-v0"),
                _bench("vs_rllib", "vs_rllib_pong_image", "--envs", "lamarckian/PongImage-v0", "--repeats", "3")),
        "vs_rllib_pong_image.json", "vs_rllib", peer=True, needs=("ale_py", "cv2")),
    Experiment(
        "vs_rllib_football", "ours against RLlib's PPO on Google Research Football: env steps/s, CPU use, memory, "
        "score rate against frames and wall time",
        "Figs. 7c, 8", "sampling and training about 2x RLlib's on Gfootball (11 vs 11), 2000-6000 cores",
        "academy_empty_goal_close with simple115v2, 2 env workers x 8 envs on {cores} cores (paper: 11 vs 11 at "
        "2000-6000 cores)",
        _scaled(_bench("vs_rllib", "vs_rllib_football", "--envs", "football:academy_empty_goal_close",
                       "--max-seconds", "150"),
                _bench("vs_rllib", "vs_rllib_football", "--envs", "football:academy_empty_goal_close",
                       "football:11_vs_11_easy_stochastic"),
                _bench("vs_rllib", "vs_rllib_football", "--envs", "football:academy_empty_goal_close",
                       "football:11_vs_11_easy_stochastic", "--repeats", "3")),
        "vs_rllib_football.json", "vs_rllib", peer=True, needs=("gfootball",)),
    Experiment(
        "pbt_vs_tune", "our PBT+PPO against Ray Tune's PBT over RLlib's PPO: time to a return of 475",
        "Fig. 9 (abstract)", "PBT+PPO 13x faster than RLlib's on vector Pong at 6000 cores",
        "CartPole-v1, population 4 on {cores} cores, each side capped (paper: vector Pong, 1G frames, 2000-6000 "
        "cores)",
        _scaled(_bench("pbt_vs_tune", "pbt_vs_tune", "--cap-seconds", "200"),
                _bench("pbt_vs_tune", "pbt_vs_tune"), _bench("pbt_vs_tune", "pbt_vs_tune")),
        "pbt_vs_tune.json", "pbt_vs_tune", peer=True),
    Experiment(
        "pbt_vs_tune_pong", "our PBT+PPO against Ray Tune's PBT over RLlib's PPO on vector Pong: time to beat the "
        "scripted opponent by one point",
        "Fig. 9", "PBT+PPO 13x faster than RLlib's on vector Pong at 6000 cores",
        "lamarckian/Pong-v0 against the opponent of skill 0.6, to 5 points, population 4 on {cores} cores, "
        "learning rate and critic loss weight searched, each side capped (paper: 1G frames, 2000-6000 cores)",
        _scaled(_bench("pbt_vs_tune", "pbt_vs_tune_pong", "--config", "configs/pbt_ppo_pong.yaml",
                       "--sides", "ours", "tune", "--cap-seconds", "400"),
                _bench("pbt_vs_tune", "pbt_vs_tune_pong", "--config", "configs/pbt_ppo_pong.yaml"),
                _bench("pbt_vs_tune", "pbt_vs_tune_pong", "--config", "configs/pbt_ppo_pong.yaml")),
        "pbt_vs_tune_pong.json", "pbt_vs_tune", peer=True),
    Experiment(
        "broadcast", "time for a 4 MB weight blob to reach every receiver: flat vs relay tree vs MPI Bcast",
        "Sec. III-B1 (Fig. 2)", "head node: flat O(n) traffic and delay, tree O(sqrt n) (analytical, no numbers)",
        "receivers in processes of one machine ({cores} cores) over loopback (paper: separate nodes); the MPI "
        "column needs mpiexec and mpi4py",
        _scaled(_bench("broadcast", "broadcast", "--receivers", "4", "8", "--reps", "5"),
                _bench("broadcast", "broadcast", "--receivers", "4", "8", "16", "32", "--reps", "10"),
                _bench("broadcast", "broadcast", "--receivers", "4", "8", "16", "32", "64", "--reps", "20")),
        "broadcast.json", "broadcast"),
    Experiment(
        "staleness", "staleness of async PPO (4 MB model) with flat and tree broadcast, against actors",
        "Fig. 7d", FIG7D_VALUE,
        "2-4 actors on {cores} cores, nodes simulated on one machine, CartPole-v1 (paper: 2000-6000 cores)",
        _scaled(_bench("staleness", "staleness", "--actors", "2", "4", "--frames", "8000"),
                _bench("staleness", "staleness"),
                _bench("staleness", "staleness", "--actors", "2", "4", "8", "16", "32", "--frames", "48000")),
        "staleness.json", "staleness"),
    Experiment(
        "sampling_hosts", "sampling and broadcast across emulated hosts: env steps/s against hosts, per-hop costs",
        "Fig. 7a-c", "near-linear: about 2, 4, 8, 15x from 10 to 160 cores; Gfootball about 17k samples/s on "
        "2000 cores, over 53k on 6000",
        "1-2 hosts emulated as network namespaces with 1 Gbit links, sharing this machine's {cores} cores; needs "
        "root (paper: real 40-core nodes)",
        _scaled(_bench("sampling_hosts", "sampling_hosts", "--hosts", "1", "2", "--seconds", "12",
                       "--link-receivers", "1", "2", "--reps", "3", "--retries", "0", "--raw-frames", "10000"),
                _bench("sampling_hosts", "sampling_hosts"),
                _bench("sampling_hosts", "sampling_hosts", "--hosts", "1", "2", "4", "8")),
        "sampling_hosts.json", "sampling_hosts"),
    Experiment(
        "scale_model", "model of broadcast latency and staleness to 6000 cores, calibrated on this run's results",
        "Fig. 7d (to 6000 cores)", FIG7D_VALUE,
        "predicted for 10-6000 cores (40 per node) from this run's emulated hosts and loopback, not measured",
        {scale: ["python", "benchmarks/scale_model.py", "--sampling-hosts", "{out}/sampling_hosts.json",
                 "--broadcast", "{out}/broadcast.json", "--staleness", "{out}/staleness.json",
                 "--output", "{out}/scale_model.json"] for scale in SCALES},
        "scale_model.json", "scale_model", after=("sampling_hosts", "broadcast", "staleness")),
)
