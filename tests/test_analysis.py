"""Analysis on files made by real short runs: serial PPO on CartPole, NSGA-II on ZDT1, a tiny
PBT+PPO run, a run read while its writer process is still appending, and the same run's file
after the writer was killed with SIGKILL. The run files come from analysis_runs.py, made once per
test session and shared with tests/test_analysis_scripts.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from analysis_runs import league_path, nsga2_path, pbt_path, ppo_path, runs_dir  # noqa: F401 (fixtures)

from lamarckian_hpc.analysis import (
    benchmark_table,
    build_report,
    cpu_utilization_table,
    elo_data,
    hyperparameter_data,
    lineage_edges,
    load_run,
    pareto_data,
    payoff_data,
    plot_elo,
    plot_hyperparameters,
    plot_learning_curves,
    plot_lineage,
    plot_pareto_fronts,
    plot_payoff,
    plot_staleness,
    plot_throughput,
    plot_tree_vs_flat,
    run_summary,
    scaling_from_benchmark,
    scaling_from_runs,
)
from lamarckian_hpc.analysis.benchmarks import broadcast_frame, read_results, sampling_frame
from lamarckian_hpc.cli import main
from lamarckian_hpc.ec.ranking import non_dominated_fronts
from lamarckian_hpc.storage import open_run

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path, min_bytes: int = 8_000) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE), path
    assert len(data) >= min_bytes, f"{path} is only {len(data)} bytes"


def _rows(path: Path, metric: str) -> int:
    try:
        with open_run(path) as reader:
            return len(reader.metric(metric))
    except (OSError, KeyError, ValueError):  # not created yet, or its groups not yet written
        return 0


@pytest.fixture(scope="module")
def live_and_killed(runs_dir: Path) -> dict:
    """A training process read while it writes, then killed with SIGKILL and read again."""
    path = runs_dir / "ppo_killed.h5"
    process = subprocess.Popen(
        [sys.executable, "-m", "lamarckian_hpc", "train", str(ROOT / "configs/ppo_cartpole.yaml"),
         "runtime.mode=serial", "stop.total_env_steps=10000000", "stop.target_return=1000000",
         "storage.metrics_interval_seconds=0.2", f"storage.directory={runs_dir}", "storage.run_name=ppo_killed"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 150
        while _rows(path, "episode_return_mean") < 3:
            assert process.poll() is None, "the training process ended before it was read"
            assert time.monotonic() < deadline, "the training process wrote no metrics in time"
            time.sleep(0.3)
        growing = load_run(path)
        first_rows = len(growing.metric("episode_return_mean"))
        while _rows(path, "episode_return_mean") <= first_rows and time.monotonic() < deadline:
            time.sleep(0.3)
        grown = load_run(path)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    return {"path": path, "growing": growing, "grown": grown, "killed": load_run(path)}


def test_loader_gives_the_file_s_metrics_long_and_wide(ppo_path: Path) -> None:
    run = load_run(ppo_path)
    assert run.closed_cleanly and run.status == "completed"
    assert run.population.empty and run.config_value("runtime.mode") == "serial"
    with open_run(ppo_path) as reader:
        expected = reader.metric("episode_return_mean")
        assert set(run.metrics["metric"]) == {name for name in reader.metric_names() if len(reader.metric(name))}
    curve = run.metric("episode_return_mean")
    assert len(curve) == len(expected) >= 4
    np.testing.assert_array_equal(curve["value"], expected.value)
    np.testing.assert_array_equal(curve["env_frames"], expected.env_frames)
    wide = run.metrics_wide()
    assert len(wide) == len(expected)
    np.testing.assert_array_equal(wide["episode_return_mean"], expected.value)
    np.testing.assert_array_equal(wide["policy_version"], expected.policy_version)
    summary = dict(run_summary(run).itertuples(index=False))
    assert summary["final episode_return_mean"] == pytest.approx(expected.value[-1])
    assert summary["env frames (largest)"] == int(expected.env_frames.max())


@pytest.mark.parametrize("x", ["env_frames", "wall_time"])
def test_learning_curves_plot_the_file_s_rows(ppo_path: Path, pbt_path: Path, tmp_path: Path, x: str) -> None:
    runs = [load_run(ppo_path), load_run(pbt_path)]
    figure = plot_learning_curves(runs, tmp_path / f"curves_{x}.png", x=x)
    assert figure is not None
    assert_png(figure.path)
    ppo_rows = figure.data[figure.data["run"] == "ppo_serial"]
    np.testing.assert_array_equal(ppo_rows[x], runs[0].metric("episode_return_mean")[x])
    pbt_rows = figure.data[figure.data["run"] == "pbt_tiny"]
    assert set(pbt_rows["metric"]) == {"best_return"}  # PBT is drawn by its best member
    np.testing.assert_array_equal(pbt_rows["value"], runs[1].metric("best_return")["value"])
    with pytest.raises(ValueError, match="x must be one of"):
        plot_learning_curves(runs, tmp_path / "bad.png", x="updates")


def test_pareto_front_is_the_non_dominated_set_of_the_history(nsga2_path: Path, tmp_path: Path) -> None:
    run = load_run(nsga2_path)
    assert run.population["generation"].nunique() == 12
    data = pareto_data(run)
    objectives = data[["objective_0", "objective_1"]].to_numpy()
    expected_front = set(non_dominated_fronts(objectives)[0])
    assert set(np.flatnonzero(data["role"] == "front")) == expected_front
    last = data["generation"] == data["generation"].max()
    assert ((data["role"] == "last generation") == (last & (data["role"] != "front"))).all()
    figure = plot_pareto_fronts([run], tmp_path / "pareto.png")
    assert figure is not None
    assert_png(figure.path)
    assert len(figure.data) == len(data)


def test_lineage_links_children_to_evaluated_parents(nsga2_path: Path, pbt_path: Path, tmp_path: Path) -> None:
    run = load_run(nsga2_path)
    edges = lineage_edges(run)
    population = run.population
    born_later = population[population["generation"] > 0]
    # NSGA-II offspring have two parents, both evaluated in earlier generations.
    assert len(edges) == 2 * len(born_later)
    assert (edges["parent_generation"] < edges["child_generation"]).all()
    assert set(edges["child_id"]) == set(born_later["id"])
    figure = plot_lineage(run, tmp_path / "lineage.png")
    assert figure is not None
    assert_png(figure.path)
    pbt = load_run(pbt_path)
    pbt_edges = lineage_edges(pbt)
    assert (pbt_edges["parent_id"] != pbt_edges["child_id"]).all()
    assert plot_lineage(pbt, tmp_path / "lineage_pbt.png") is not None


def test_pbt_hyperparameters_over_time(pbt_path: Path, nsga2_path: Path, tmp_path: Path) -> None:
    run = load_run(pbt_path)
    assert run.genome_names == ["learning_rate", "value_weight", "entropy_weight"]
    data = hyperparameter_data(run)
    assert set(data["hyperparameter"]) == set(run.genome_names)
    with open_run(pbt_path) as reader:
        columns = reader.genome_columns()
    learning_rates = data[data["hyperparameter"] == "learning_rate"]["value"].to_numpy()
    np.testing.assert_allclose(np.sort(learning_rates), np.sort(columns["learning_rate"]))
    figure = plot_hyperparameters(run, tmp_path / "hyperparameters.png")
    assert figure is not None
    assert_png(figure.path)
    assert plot_hyperparameters(load_run(nsga2_path), tmp_path / "none.png") is None  # unnamed genome


def test_a_file_still_being_written_reads_as_running(live_and_killed: dict, tmp_path: Path) -> None:
    growing, grown = live_and_killed["growing"], live_and_killed["grown"]
    assert not growing.closed_cleanly and growing.status == "running"
    assert len(grown.metric("episode_return_mean")) > len(growing.metric("episode_return_mean")) >= 3
    figure = plot_learning_curves([growing], tmp_path / "growing.png")
    assert figure is not None
    assert_png(figure.path)
    np.testing.assert_array_equal(figure.data["value"], growing.metric("episode_return_mean")["value"])


def test_a_killed_run_keeps_its_complete_rows(live_and_killed: dict, tmp_path: Path) -> None:
    killed = live_and_killed["killed"]
    assert not killed.closed_cleanly and killed.status == "incomplete (killed or failed)"
    rows = len(killed.metric("episode_return_mean"))
    assert rows >= len(live_and_killed["grown"].metric("episode_return_mean"))
    for _, metric_rows in killed.metrics.groupby("metric"):
        assert metric_rows[["wall_time", "env_frames", "policy_version", "value"]].notna().all().all()
    figure = plot_learning_curves([killed], tmp_path / "killed.png", x="wall_time")
    assert figure is not None and len(figure.data) == rows


def test_scaling_figures_from_benchmark_json_and_runs(ppo_path: Path, tmp_path: Path) -> None:
    sampling = read_results(RESULTS / "sampling.json")
    scaling = scaling_from_benchmark(sampling_frame(sampling))
    throughput = plot_throughput(scaling, tmp_path / "throughput.png")
    staleness = plot_staleness(scaling, tmp_path / "staleness.png")
    assert throughput is not None and staleness is not None
    assert_png(throughput.path)
    assert_png(staleness.path)
    plotted = {(row.series, row.cores): row.steps_per_second for row in throughput.data.itertuples()}
    for row in sampling["results"]:
        assert plotted[(f"benchmark: {row['env']}", row["num_actors"])] == pytest.approx(row["steps_per_second"])
    run = load_run(ppo_path)
    from_runs = scaling_from_runs([run])
    assert list(from_runs["cores"]) == [1]  # a serial run is one core
    rates = run.metric("env_frames_per_second")["value"].iloc[1:]
    assert from_runs["steps_per_second"].iloc[0] == pytest.approx(rates.mean())


def test_tree_vs_flat_from_broadcast_results(tmp_path: Path) -> None:
    broadcast = broadcast_frame(read_results(RESULTS / "broadcast.json"))
    assert not broadcast.empty
    figure = plot_tree_vs_flat(broadcast, broadcast.iloc[0:0].reindex(columns=["receivers"]), tmp_path / "tree.png")
    assert figure is not None
    assert_png(figure.path)
    assert figure.data["tree_ms"].tolist() == broadcast["tree_ms"].tolist()


def test_cpu_utilization_table_and_benchmark_tables() -> None:
    results = {name: read_results(RESULTS / f"{name}.json") for name in ("sampling", "vs_rllib")}
    table = cpu_utilization_table([], results)
    rllib = table[table["what"].str.endswith("RLlib")]
    assert list(rllib["cpu_utilization"]) == [summary["rllib"]["cpu_utilization"]
                                              for summary in results["vs_rllib"]["summaries"]]
    side_by_side = benchmark_table("vs_rllib", results["vs_rllib"])
    assert {"ours", "RLlib", "ours / RLlib"} <= set(side_by_side["side"])
    pbt_vs_tune = read_results(RESULTS / "pbt_vs_tune.json")
    pbt_table = benchmark_table("pbt_vs_tune", pbt_vs_tune).set_index("side")
    for side, record in pbt_vs_tune["records"].items():
        reached = [value for value in record.get("reached_seconds", []) if value is not None]
        assert pbt_table.loc[side, "members_reached"] == len(reached)
        if reached:
            assert pbt_table.loc[side, "first_member_seconds"] == pytest.approx(min(reached))


def test_runs_without_a_league_give_no_league_figures(ppo_path: Path, nsga2_path: Path, tmp_path: Path) -> None:
    for path in (ppo_path, nsga2_path):
        run = load_run(path)
        assert run.league == {}
        assert payoff_data(run).empty and elo_data(run).empty
        assert plot_payoff(run, tmp_path / "payoff.png") is None and plot_elo(run, tmp_path / "elo.png") is None


def test_league_payoff_and_elo_from_the_run_file(league_path: Path, tmp_path: Path) -> None:
    run = load_run(league_path)
    count = int(run.league["members/count"][0])
    names = [name.decode() for name in run.league["member_names"][:count]]
    payoff = payoff_data(run)
    assert list(payoff.index) == names and payoff.shape == (count, count)
    played = run.league["results/games"][:count, :count] > 0
    np.testing.assert_allclose(payoff.to_numpy()[played], run.league["payoff"][:count, :count][played])
    assert np.isnan(payoff.to_numpy()[~played]).all()
    elo = elo_data(run)
    main_agent = elo[elo["member"] == names[0]]
    np.testing.assert_array_equal(main_agent["update"], run.league["history/update"])
    np.testing.assert_allclose(main_agent["elo"], run.league["history/elo"][:, 0])
    for figure in (plot_payoff(run, tmp_path / "payoff.png"), plot_elo(run, tmp_path / "elo.png")):
        assert figure is not None
        assert_png(figure.path)


@pytest.mark.second_pass  # over 15 s on two cores
def test_report_links_every_figure(ppo_path: Path, nsga2_path: Path, pbt_path: Path, league_path: Path,
                                   live_and_killed: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    for path in (ppo_path, nsga2_path, pbt_path, league_path, live_and_killed["path"]):
        shutil.copy(path, folder / path.name)
    for name in ("sampling", "broadcast", "vs_rllib", "nsga2_vs_pymoo", "scale_model"):
        shutil.copy(RESULTS / f"{name}.json", folder)
    assert main(["report", str(folder), "--out", str(tmp_path / "report")]) == 0
    markdown_path = Path(capsys.readouterr().out.strip())
    assert markdown_path == tmp_path / "report" / "report.md"
    report = markdown_path.read_text()
    figures = sorted((tmp_path / "report" / "figures").glob("*.png"))
    names = {figure.name for figure in figures}
    assert {"curve_episode_return_mean_frames.png", "curve_episode_return_mean_wall_time.png",
            "curve_best_return_frames.png", "curve_hypervolume_frames.png", "throughput_vs_cores.png",
            "staleness_vs_cores.png", "tree_vs_flat.png", "pareto_fronts.png", "lineage_nsga2_zdt1.png",
            "hyperparameters_pbt_tiny.png", "scale_model.png", "payoff_league_rps.png", "elo_league_rps.png"} <= names
    for figure in figures:
        assert f"](figures/{figure.name})" in report
        assert_png(figure, min_bytes=5_000)
    for name in ("ppo_serial", "nsga2_zdt1", "pbt_tiny", "ppo_killed"):
        assert f"## Run `{name}`" in report
    assert "incomplete (killed or failed)" in report and "No run here has a `/league` group" not in report
    assert "## Benchmark: Ours vs RLlib (PPO)" in report


def test_report_on_one_run_file(nsga2_path: Path, tmp_path: Path) -> None:
    report = build_report(nsga2_path, tmp_path / "one")
    assert {figure.path.name for figure in report.figures} >= {"pareto_fronts.png", "lineage_nsga2_zdt1.png"}


def test_report_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    not_hdf5 = tmp_path / "notes.h5"
    not_hdf5.write_text("not a run")
    (tmp_path / "empty").mkdir()
    cases = {str(tmp_path / "missing.h5"): "no such run file or folder",
             str(not_hdf5): "is not a readable run file",
             str(ROOT / "README.md"): "is not a run file",
             str(tmp_path / "empty"): "holds no run files"}
    for path, message in cases.items():
        assert main(["report", path]) == 2
        error = capsys.readouterr().err
        assert message in error and error.count("\n") == 1, error
    assert not os.path.exists(tmp_path / "empty" / "report")


REPRODUCE = [sys.executable, str(ROOT / "benchmarks" / "reproduce.py")]


def test_reproduce_lists_one_array_task_per_experiment() -> None:
    """slurm/reproduce.sbatch sizes its job array with --count and runs task K with --task-index K;
    every experiment has a command of its own at every scale: nothing is copied from benchmarks/results."""
    count = int(subprocess.run([*REPRODUCE, "--count"], capture_output=True, text=True, check=True).stdout)
    for scale in ("small", "medium", "large", "paper"):  # paper: the old name of large
        listing = subprocess.run([*REPRODUCE, "--list", "--scale", scale], capture_output=True, text=True, check=True)
        lines = listing.stdout.splitlines()
        assert len(lines) == count and [int(line.split()[0]) for line in lines] == list(range(count))
        assert any("lamarckian-hpc train" in line for line in lines) and any("evolve" in line for line in lines)
        assert not [line for line in lines if "copied" in line or "not run" in line], listing.stdout
        assert all(line.split(": ", 1)[1].startswith(("lamarckian-hpc ", "python ")) for line in lines), listing.stdout
        for name in ("vs_rllib", "vs_rllib_pong_image", "vs_rllib_football", "pbt_vs_tune", "broadcast", "staleness",
                     "scale_model"):
            assert any(f" {name}: python benchmarks/" in line and "{out}/" in line for line in lines), name
    bad = subprocess.run([*REPRODUCE, "--task-index", str(count)], capture_output=True, text=True)
    assert bad.returncode == 2 and "--task-index must be in" in bad.stderr


def test_reproduce_table_has_the_papers_values_and_says_when_rllib_is_missing(tmp_path: Path) -> None:
    """A real NSGA-II run and the two peer comparisons with a peer interpreter that has no RLlib
    (this Python without its site-packages): experiments.md puts the paper's figure and value
    beside the figure measured here, and the peer rows say they were not run, and why."""
    peer = tmp_path / "python-without-site-packages"
    peer.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    peer.chmod(0o755)
    out = tmp_path / "out"
    subprocess.run([*REPRODUCE, "--only", "nsga2_zdt1", "vs_rllib", "pbt_vs_tune", "--peer-python", str(peer),
                    "--no-report", "--out", str(out)], check=True, capture_output=True, text=True, timeout=300)
    table = (out / "experiments.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| experiment"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    assert columns[:5] == ["experiment", "paper", "paper's reported value", "measured here", "where this scale differs"]
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.strip("|").split("|")]
            for line in table.splitlines() if line.startswith("| ") and not line.startswith(("| experiment", "|---"))}
    assert set(rows) == {"nsga2_zdt1", "vs_rllib", "pbt_vs_tune"}
    nsga2 = dict(zip(columns, rows["nsga2_zdt1"]))
    assert nsga2["paper"] == "Fig. 11b" and "NSGA-II" in nsga2["paper's reported value"]
    assert nsga2["how"] == "ran" and nsga2["measured here"].startswith("hypervolume 0.")
    assert "ZDT1" in nsga2["where this scale differs"]
    assert "copied" not in table and not list(out.glob("*.json"))
    for name, paper in (("vs_rllib", "Table IV"), ("pbt_vs_tune", "Fig. 9")):
        row = dict(zip(columns, rows[name]))
        assert row["how"].startswith("not run: needs RLlib") and "benchmarks/peers/vs_rllib.py" in row["how"], row
        assert paper in row["paper"] and row["paper's reported value"] not in ("", "-")


def test_reproduce_says_which_module_an_experiment_lacks(tmp_path: Path, monkeypatch) -> None:
    """The image-Pong and Football comparisons need their environment's extra besides RLlib; an
    interpreter without it gets a row that names the module, and nothing runs."""
    import dataclasses

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import reproduce
    from reproduce import EXPERIMENTS

    needs = {experiment.name: experiment.needs for experiment in EXPERIMENTS}
    assert needs["vs_rllib_pong_image"] == ("ale_py", "cv2") and needs["vs_rllib_football"] == ("gfootball",)
    football = next(experiment for experiment in EXPERIMENTS if experiment.name == "vs_rllib_football")
    lacking = dataclasses.replace(football, peer=False, needs=("json", "lamarckian_hpc_no_such_extra"))
    row = reproduce.run_experiment(lacking, "small", tmp_path, timeout_seconds=60)
    assert row["how"].startswith("not run: needs lamarckian_hpc_no_such_extra (") and "ModuleNotFoundError" in row["how"]
    assert row["measured"] == "-" and not (tmp_path / "logs").exists()


def test_throughput_and_hosts_over_a_run_that_nodes_joined_and_left(ppo_path: Path, tmp_path: Path) -> None:
    from lamarckian_hpc.analysis.loader import load_run
    from lamarckian_hpc.analysis.membership import membership_analysis
    from lamarckian_hpc.storage import RunWriter

    # As a run that two actor jobs joined and one left records it: hosts and actors at every update.
    hosts = [1, 1, 2, 2, 2, 3, 3, 2, 2]
    path = tmp_path / "grown.h5"
    names = ["env_frames_per_second", "hosts_connected", "actors_connected"]
    with RunWriter(path, {"algorithm": {"name": "ppo"}, "runtime": {"mode": "ray"}}, names) as writer:
        for update, count in enumerate(hosts):
            writer.append_many({"env_frames_per_second": 1000.0 * count + update, "hosts_connected": float(count),
                                "actors_connected": float(2 * count)},
                               env_frames=512 * (update + 1), policy_version=update + 1, wall_time=10.0 * (update + 1))
    analysis = membership_analysis([load_run(path), load_run(ppo_path)], tmp_path / "figures")
    assert [figure.path.name for figure in analysis.figures] == ["throughput_and_hosts.png"]
    assert analysis.figures[0].path.is_file()
    assert set(analysis.figures[0].data["run"]) == {"grown"}  # the serial run's hosts never changed
    table = analysis.table
    assert table["hosts"].tolist() == [1, 2, 3, 2] and table["updates"].tolist() == [2, 3, 2, 2]
    assert table["from_s"].tolist() == [10.0, 30.0, 60.0, 80.0]
    assert table["env_frames_per_second"].tolist() == [1000.5, 2003.0, 3005.5, 2007.5]
    assert table["per_host"].tolist() == [1000.5, 1001.5, 1001.8, 1003.8]
