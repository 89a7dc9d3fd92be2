"""`lamarckian-hpc`: run a config, and inspect the file a run wrote.

The run commands parse, call the library (`lamarckian_hpc.library`) and print its result
(`cli_results`); `run` takes any config, `train`, `evolve` and `league` one workload each. User
mistakes (a bad config, a missing file, another command's config) end with one line on stderr and
exit status 2; tracebacks are kept for bugs. `key.path=value` overrides may stand anywhere after
the subcommand, before or after its options.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from .config import ConfigError, load_config
from .library import run_path_for, unreadable_run_file

__all__ = ["build_parser", "main", "parse_arguments", "run_path_for"]

USAGE_ERROR = 2


def _fail(message: str) -> int:
    print(message, file=sys.stderr)
    return USAGE_ERROR


def _config_and_overrides(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """The config file and overrides of a run command. With `--resume RUN` the run continues with
    the config it stored, and the positional config slot may hold the first override (a longer
    budget, say)."""
    # --tensorboard DIR is the override storage.tensorboard=DIR, given last so that it wins
    tensorboard = [f"storage.tensorboard={args.tensorboard}"] if args.tensorboard is not None else []
    if args.resume is None:
        return args.config, [*args.overrides, *tensorboard]
    overrides = [args.config, *args.overrides] if args.config is not None else list(args.overrides)
    if any("=" not in override for override in overrides):
        raise ConfigError("error: --resume continues a run with its own config; give overrides, not a file")
    return None, [*overrides, *tensorboard]


def run_command(args: argparse.Namespace) -> int:
    """`run`, `train`, `evolve` and `league`: prepare the config (a config of another workload ends
    in one line naming the command that runs it; `run` takes any), run it with the library, print
    the result tables and, last, the run file's path."""
    from .cli_results import print_result
    from .library import execute, prepare
    from .run_result import RunFailed

    command = args.command
    if args.config is None and args.resume is None:
        return _fail(f"error: {command} needs a config file (or --resume RUN)")
    try:
        config_file, overrides = _config_and_overrides(args)
        prepared = prepare(config_file, overrides, resume=args.resume, command=command, checkpoint=args.checkpoint,
                           force=args.force)
    except ConfigError as error:
        return _fail(str(error))
    console = Console(stderr=True)
    observers: tuple[Any, ...] = ()
    if prepared.workload == "train":
        from .progress import ConsoleProgress

        observers = (ConsoleProgress(prepared.config.stop.total_env_steps, console),)
    try:
        result = execute(prepared, observers=observers,
                         on_start=lambda path: console.print(f"run file: {path}", highlight=False))
    except RunFailed as error:
        print(error, file=sys.stderr)
        return error.exit_status
    print_result(result)
    print(result.path)
    return 0


def _flatten(tree: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            rows += _flatten(value, f"{prefix}{key}.")
        else:
            rows.append((f"{prefix}{key}", value))
    return rows


def inspect_command(args: argparse.Namespace) -> int:
    from .storage import open_run

    path = Path(args.run)
    if not path.is_file():
        return _fail(f"error: no such run file: {path}")
    try:
        with open_run(path) as reader:
            summary = reader.summary()
            recorded = {policy: reader.episodes(policy) for policy in reader.trajectory_policies()}
    except (OSError, KeyError, ValueError) as error:
        return _fail(unreadable_run_file(path, error))
    if args.json:
        print(json.dumps(summary.to_json_dict(), indent=2))
        return 0
    console = Console()
    status = "completed" if summary.closed_cleanly else "still being written, failed, or its writer was killed"
    console.print(f"[bold]{path}[/bold]  ({status})")
    console.print(f"env frames {summary.env_frames:,}   wall time {summary.wall_time_seconds:.1f} s   "
                  f"package {summary.meta.get('package_version')}   host {summary.meta.get('hostname')}")
    if summary.meta.get("learner_device"):
        console.print(f"learner on {summary.meta['learner_device']}", highlight=False)
    per_node = summary.meta.get("actors_per_node")
    if isinstance(per_node, dict):
        nodes = ", ".join(f"{node} {count}" for node, count in per_node.items())
        steps = summary.meta.get("message_steps")
        console.print(f"{sum(per_node.values())} actors on {len(per_node)} node(s): {nodes}; "
                      f"{summary.meta.get('broadcast_layout', 'flat')} layout"
                      + (f", messages of {steps} env steps" if steps else ""), highlight=False)
    per_rank = summary.meta.get("actors_per_learner_rank")
    if isinstance(per_rank, list):  # whose experience each learner rank takes
        console.print(f"{len(per_rank)} learner ranks, actors each: "
                      + ", ".join(f"rank {rank} {count}" for rank, count in enumerate(per_rank)), highlight=False)
    for policy, index in recorded.items():  # what `replay --episode K [--member M]` can show
        numbers, members = index["episode"], sorted({int(member) for member in index["member"] if member >= 0})
        shown = ", ".join(str(number) for number in numbers[:8]) + (", ..." if len(numbers) > 8 else "")
        whose = f" (members {', '.join(map(str, members))})" if members else ""
        console.print(f"recorded episodes of {policy}{whose}: {len(numbers)}{': ' + shown if shown else ''}",
                      highlight=False)
    config_table = Table("config", "value", title="config")
    for key, value in _flatten(summary.config):
        config_table.add_row(key, str(value))
    console.print(config_table)
    metrics_table = Table("metric", "last value", "rows", title="metrics")
    for name in sorted(summary.counts):
        last = summary.last_values.get(name)
        metrics_table.add_row(name, "n/a" if last is None else f"{last:.6g}", str(summary.counts[name]))
    console.print(metrics_table)
    return 0


def config_show_command(args: argparse.Namespace) -> int:
    """Print the config a run would use: the file, the overrides and every default, as YAML that
    `train` or `evolve` accepts again."""
    import yaml

    from .config.evorl import config_model

    try:
        config = load_config(args.config, args.overrides, config_model(args.config, args.overrides))
    except ConfigError as error:
        return _fail(str(error))
    print(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False), end="")
    return 0


def report_command(args: argparse.Namespace) -> int:
    try:  # pandas and matplotlib: the analysis extra
        from .analysis import RunFileError, build_report
    except ImportError as error:
        return _fail(f"error: report needs the analysis extra ({error.name} is missing): "
                     "pip install -c constraints.txt -e '.[analysis]'")
    try:
        report = build_report(Path(args.path), args.out)
    except RunFileError as error:
        return _fail(str(error))
    for reason in report.skipped:
        print(f"skipped: {reason}", file=sys.stderr)
    print(f"{len(report.runs)} run(s), {len(report.benchmarks)} benchmark result(s), "
          f"{len(report.figures)} figure(s)", file=sys.stderr)
    print(report.markdown_path)
    return 0


def export_command(args: argparse.Namespace) -> int:
    """Each run's metrics as TensorBoard event files (`--tensorboard DIR`) and CSV (`--csv DIR`),
    under DIR/<run name>/ (see lamarckian_hpc.analysis.export); its trained policy as ONNX and
    TorchScript (`--onnx DIR`, `--torchscript DIR`: DIR/<run name>/policy.onnx and policy.pt,
    checked against torch on the run's recorded observations); its recorded episodes as a Minari
    dataset (`--minari DATASET_ID`, one run)."""
    metrics = args.tensorboard is not None or args.csv is not None
    policy = args.onnx is not None or args.torchscript is not None
    if not (metrics or policy or args.minari is not None):
        return _fail("error: export needs at least one of --tensorboard DIR, --csv DIR, --onnx DIR, "
                     "--torchscript DIR, --minari DATASET_ID")
    if len(args.runs) > 1 and (args.minari is not None or args.checkpoint != "last"):
        return _fail("error: --minari and --checkpoint take one run file, got " + str(len(args.runs)))
    if args.checkpoint != "last" and not policy:
        return _fail("error: --checkpoint chooses the weights of --onnx or --torchscript; give one of them")
    for index, name in enumerate(args.runs, start=1):
        path = Path(name)
        if len(args.runs) > 1:
            print(f"[{index}/{len(args.runs)}] exporting {path}", file=sys.stderr, flush=True)
        status = (_export_metrics(path, args) if metrics else 0) or (_export_policy(path, args) if policy else 0) \
            or (_export_minari(path, args.minari) if args.minari is not None else 0)
        if status:
            return status
    return 0


def _export_metrics(path: Path, args: argparse.Namespace) -> int:
    try:  # pandas (the analysis extra, part of the export extra)
        from .analysis import RunFileError, load_run
        from .analysis.export import TensorBoardMissing, export_csv, export_tensorboard
    except ImportError as error:
        return _fail(f"error: export needs the export extra ({error.name} is missing): "
                     "pip install -c constraints.txt -e '.[export]'")
    try:
        run = load_run(path)
        if args.tensorboard is not None:
            print(export_tensorboard(run, args.tensorboard))
    except (RunFileError, TensorBoardMissing) as error:
        return _fail(str(error))
    if args.csv is not None:
        written = export_csv(run, args.csv)
        print(written[0].parent if written else f"{path}: no metric rows to export")
    return 0


def _export_policy(path: Path, args: argparse.Namespace) -> int:
    """The run's greedy policy as ONNX and/or TorchScript, each file then run on the run's
    recorded observations (or observations drawn from its space) beside torch: the line on stderr
    says how far apart they are."""
    from .trained.policy import TrainedPolicyError, load_trained_policy
    from .trained.policy_export import ExportError, check_exports, check_observations, export_onnx, export_torchscript

    try:
        trained = load_trained_policy(path, args.checkpoint)
        onnx_path = export_onnx(trained, args.onnx / path.stem / "policy.onnx", path.stem) \
            if args.onnx is not None else None
        torchscript_path = export_torchscript(trained, args.torchscript / path.stem / "policy.pt") \
            if args.torchscript is not None else None
        observations, source = check_observations(path, trained.observation_space)
        checks = check_exports(trained, observations, onnx_path, torchscript_path)
    except TrainedPolicyError as error:
        return _fail(f"error: {error}")
    except ExportError as error:
        return _fail(str(error))
    for check in checks:
        print(f"{check.summary()} ({source})", file=sys.stderr)
        print(check.file)
    return 0


def _export_minari(path: Path, dataset_id: str) -> int:
    from .trained.minari_export import MinariExportError, export_minari

    try:
        exported = export_minari(path, dataset_id)
    except MinariExportError as error:
        return _fail(str(error))
    print(exported.summary(), file=sys.stderr)
    print(exported.path)
    return 0


def replay_command(args: argparse.Namespace) -> int:
    """A recorded episode as an animated GIF; see lamarckian_hpc.analysis.replay."""
    try:  # Pillow (with matplotlib, the analysis extra)
        from .analysis.replay import ReplayError, replay_episode
    except ImportError as error:
        return _fail(f"error: replay needs the analysis extra ({error.name} is missing): "
                     "pip install -c constraints.txt -e '.[analysis]'")
    try:
        replay = replay_episode(Path(args.run), args.episode, args.policy, args.out, args.fps, args.member)
    except ReplayError as error:
        return _fail(str(error))
    print(replay.summary(), file=sys.stderr)
    print(replay.path)
    return 0


def evaluate_command(args: argparse.Namespace) -> int:
    """A training run's policy (or a PBT member's, a league learner's) played for --episodes episodes;
    see lamarckian_hpc.trained.evaluation. The GIF is drawn by `replay` from the recorded episodes (a
    temporary file without --record)."""
    import tempfile

    from .cli_results import print_evaluation
    from .library import evaluate
    from .run_result import RunFailed

    if args.gif is not None:
        try:  # Pillow (with matplotlib, the analysis extra)
            from .analysis.replay import MAX_FPS, ReplayError, replay_episode
        except ImportError as error:
            return _fail(f"error: --gif needs the analysis extra ({error.name} is missing): "
                         "pip install -c constraints.txt -e '.[analysis]'")
        if not 1 <= args.fps <= MAX_FPS:
            return _fail(f"error: --fps must be between 1 and {MAX_FPS}")
    with tempfile.TemporaryDirectory(prefix="lamarckian-evaluate-") as scratch:
        record = args.record if args.record is not None or args.gif is None else Path(scratch) / "episodes.h5"
        try:
            evaluation = evaluate(args.run, args.checkpoint, args.episodes, args.seed, sample=args.sample,
                                  record=record, member=args.member, learner=args.learner,
                                  opponent=args.opponent)
        except RunFailed as error:
            print(error, file=sys.stderr)
            return error.exit_status
        if args.json:
            print(json.dumps({"run": str(evaluation.run), "checkpoint": str(evaluation.checkpoint),
                              "policy_version": evaluation.policy_version, "seed": evaluation.seed,
                              "sampled": evaluation.sampled, "returns": list(evaluation.returns),
                              "lengths": list(evaluation.lengths), "mean_return": evaluation.mean_return,
                              "half_width_95": evaluation.half_width, "opponent": evaluation.opponent,
                              "wins_draws_losses": list(evaluation.wins_draws_losses)}))
        else:
            print_evaluation(evaluation)
        if args.gif is not None:
            try:
                replay = replay_episode(record, 0, None, args.gif, args.fps)
            except ReplayError as error:
                return _fail(str(error))
            print(f"first episode: {replay.path} ({replay.steps} frames)", file=sys.stderr)
    if args.record is not None:
        print(f"episodes: {args.record}", file=sys.stderr)
    return 0


#: The commands that run a config, all through `run_command`: (help, the config's help, --resume's help).
RUN_COMMANDS: dict[str, tuple[str, str, str]] = {
    "run": ("run any config: training, evolution, PBT, EMOGI, a league (the config says which)",
            "YAML config file (see configs/)", "continue this run file where it stopped"),
    "train": ("train a policy from a config file", "YAML config file (see configs/)",
              "continue this run file from its last checkpoint"),
    "evolve": ("run an evolutionary algorithm from a config file", "YAML config file (see configs/nsga2_zdt1.yaml)",
               "continue this run file where it stopped (after its last generation, or a PBT run's last interval)"),
    "league": ("run an AlphaStar league from a config file (see configs/league_pong.yaml); the same as evolve for "
               "such a config", "YAML config file with algorithm.name: league",
               "continue this run file after its last saved generation"),
}


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="lamarckian-hpc", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (summary, config_help, resume_help) in RUN_COMMANDS.items():
        command = commands.add_parser(name, help=summary)
        command.add_argument("config", nargs="?", help=config_help)
        command.add_argument("overrides", nargs="*", metavar="key.path=value", help="override config fields")
        command.add_argument("--resume", metavar="RUN", help=resume_help)
        command.add_argument("--tensorboard", type=Path, metavar="DIR",
                             help="also write the metrics live as TensorBoard event files in DIR/<run name>/ "
                                  "(storage.tensorboard; needs the export extra)")
        command.add_argument("--checkpoint", default="last", metavar="last|best|FILE",
                             help="with --resume of a training run: continue from the newest checkpoint (last, the "
                                  "default), the best kept one (best) or a checkpoint file")
        command.add_argument("--force", action="store_true",
                             help="with --resume of a training run: continue from a --checkpoint older than the "
                                  "run's newest (the run file's later rows are dropped, the newer kept checkpoints "
                                  "are removed at the first save)")
        command.set_defaults(handler=run_command)
    inspect = commands.add_parser("inspect", help="summarise a run file")
    inspect.add_argument("run", help="the run's .h5 file")
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    inspect.set_defaults(handler=inspect_command)
    report = commands.add_parser("report", help="figures and a Markdown report from run files and benchmark results")
    report.add_argument("path", metavar="RUN.h5|DIR", help="a run file, or a folder of run files and results JSON")
    report.add_argument("--out", metavar="DIR", help="where report.md and figures/ go (default: DIR/report, "
                        "or RUN-report beside a run file)")
    report.set_defaults(handler=report_command)
    export = commands.add_parser("export", help="a run's metrics (TensorBoard, CSV), trained policy (ONNX, "
                                 "TorchScript) or recorded episodes (Minari) for use outside")
    export.add_argument("runs", nargs="+", metavar="RUN.h5", help="run files (complete, still growing, or killed)")
    export.add_argument("--tensorboard", type=Path, metavar="DIR",
                        help="write DIR/<run>/events.out.tfevents.* (step: env frames); needs the export extra")
    export.add_argument("--csv", type=Path, metavar="DIR", help="write DIR/<run>/<metric>.csv, one file per metric")
    export.add_argument("--onnx", type=Path, metavar="DIR",
                        help="write the trained greedy policy to DIR/<run>/policy.onnx (needs the export extra)")
    export.add_argument("--torchscript", type=Path, metavar="DIR",
                        help="write the trained greedy policy to DIR/<run>/policy.pt (torch.jit.load)")
    export.add_argument("--checkpoint", default="last", metavar="last|best|FILE",
                        help="the weights to export: the newest checkpoint (last, the default), the best kept one "
                             "(best) or a checkpoint file")
    export.add_argument("--minari", metavar="DATASET_ID",
                        help="write the run's recorded episodes as Minari dataset DATASET_ID (e.g. "
                        "lamarckian/cartpole-ppo-v0) under $MINARI_DATASETS_PATH (default ~/.minari/datasets); "
                        "single-agent training runs")
    export.set_defaults(handler=export_command)
    replay = commands.add_parser("replay", help="a recorded episode of a run as an animated GIF")
    replay.add_argument("run", metavar="RUN.h5", help="a run file that records episodes (storage.trajectories)")
    replay.add_argument("--episode", type=int, required=True, metavar="K", help="the episode's number in the run")
    replay.add_argument("--policy", metavar="P", help="whose episode (default: the only policy recorded)")
    replay.add_argument("--member", type=int, metavar="M",
                        help="a population run's member (PBT member id, EMOGI policy, league learner slot) whose "
                             "episode K it is; needed when several members recorded an episode K")
    replay.add_argument("--out", type=Path, metavar="FILE.gif",
                        help="where the GIF goes (default: <run>-<policy>-episode<K>.gif here)")
    replay.add_argument("--fps", type=int, default=30, metavar="N", help="frames (steps) per second (default: 30)")
    replay.set_defaults(handler=replay_command)
    evaluate = commands.add_parser("evaluate", help="play a training run's policy (or a PBT member's, a league "
                                   "learner's) from its checkpoint: mean return with a 95%% confidence interval")
    evaluate.add_argument("run", metavar="RUN.h5", help="a training, PBT or league run's file (its checkpoints lie "
                          "beside it)")
    evaluate.add_argument("--checkpoint", default="last", metavar="last|best|FILE",
                          help="the newest checkpoint (last, the default), the best kept one (best) or a file")
    evaluate.add_argument("--member", type=int, metavar="ID",
                          help="a PBT run: play member ID (an id the run printed or recorded in /population) as "
                               "its last saved interval left it")
    evaluate.add_argument("--learner", metavar="NAME",
                          help="a league run: play learner NAME (main_0, main_exploiter_0, league_exploiter_0, ...) "
                               "against the scripted Pong player, as its last saved generation left it")
    evaluate.add_argument("--opponent", metavar="NAME",
                          help="with --learner: play the league's game against learner NAME (greedy, from the other "
                               "seat) instead of the scripted player")
    evaluate.add_argument("--episodes", type=int, default=10, metavar="N", help="episodes to play (default: 10)")
    evaluate.add_argument("--seed", type=int, default=0, metavar="S",
                          help="episode k starts from env.reset(seed=S+k); sampled actions draw from torch "
                               "seeded with S (default: 0)")
    evaluate.add_argument("--sample", action="store_true",
                          help="sample actions from the policy (default: greedy, the most probable or mean action)")
    evaluate.add_argument("--record", type=Path, metavar="FILE.h5",
                          help="write the played episodes to an HDF5 file in the run file's /trajectories layout")
    evaluate.add_argument("--gif", type=Path, metavar="FILE.gif", help="write the first episode as an animated GIF")
    evaluate.add_argument("--fps", type=int, default=30, metavar="N", help="GIF frames per second (default: 30)")
    evaluate.add_argument("--json", action="store_true", help="print the returns and the interval as JSON")
    evaluate.set_defaults(handler=evaluate_command)
    config = commands.add_parser("config", help="show the resolved config of a config file")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    show = config_commands.add_parser("show", help="print the config with the overrides applied and every default")
    show.add_argument("config", help="YAML config file (train or evolve)")
    show.add_argument("overrides", nargs="*", metavar="key.path=value", help="override config fields")
    show.set_defaults(handler=config_show_command)
    from .cluster.command import add_launch_parser  # `launch`: submit a run to Slurm (the slurm extra)

    add_launch_parser(commands)
    return parser


def parse_arguments(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """argparse stops filling a `nargs="*"` positional at the first option, so overrides given after
    an option come back as unknown arguments; they are appended to the overrides, in order. Any
    other unknown argument is an error, as with `parse_args`."""
    args, unknown = parser.parse_known_args(argv)
    overrides = [text for text in unknown if "=" in text and not text.startswith("-")]
    rest = [text for text in unknown if text not in overrides]
    if rest or (overrides and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(rest or overrides)}")
    if overrides:
        args.overrides = [*args.overrides, *overrides]
    return args


def importable_from_here(folder: str | None = None) -> None:
    """Let a run import modules from the folder the command runs in (a `my_envs:MyEnv-v0` env id
    with my_envs.py there), as `python -m` would: the folder joins this process's sys.path, after
    the installed packages (a file there never hides one), and PYTHONPATH, which every process the
    run starts inherits (a local Ray's workers) or is given (actors on a joined Ray cluster)."""
    folder = os.path.abspath(folder or os.getcwd())
    if folder not in (os.path.abspath(entry or ".") for entry in sys.path):
        sys.path.append(folder)
    paths = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if folder not in (os.path.abspath(entry) for entry in paths):
        os.environ["PYTHONPATH"] = os.pathsep.join([*paths, folder])


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse_arguments(parser, argv)
    return args.handler(args)


def shell_main() -> int:
    """The `lamarckian-hpc` command: `main`, with the folder it runs in importable. Kept apart from
    `main` so that a program calling `main` in-process keeps its own sys.path and environment."""
    importable_from_here()
    return main()


if __name__ == "__main__":
    sys.exit(shell_main())
