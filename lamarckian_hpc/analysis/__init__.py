"""Post-hoc analysis: run files and benchmark results as DataFrames, the paper's figures, and
the Markdown report of `lamarckian-hpc report`. Needs the `analysis` extra (pandas, matplotlib).

Each topic is one function that takes runs and a folder and returns an `Analysis` (its figures and
a table): `learning_curve_analysis`, `staleness_analysis`, `scaling_analysis`, `pareto_analysis`,
`lineage_analysis`, `league_analysis`, `trajectory_analysis`. The scripts in the repository's `analysis/` folder and
`lamarckian-hpc report` call the same ones."""

from lamarckian_hpc.analysis.benchmarks import benchmark_table, find_benchmark_files, load_benchmarks
from lamarckian_hpc.analysis.curves import (
                                            learning_curve_analysis,
                                            learning_curve_data,
                                            plot_learning_curves,
                                            progress_metric,
)
from lamarckian_hpc.analysis.league import elo_data, league_analysis, league_table, payoff_data, plot_elo, plot_payoff
from lamarckian_hpc.analysis.lineage import (
                                            hyperparameter_data,
                                            lineage_analysis,
                                            lineage_edges,
                                            lineage_table,
                                            plot_hyperparameters,
                                            plot_lineage,
)
from lamarckian_hpc.analysis.loader import (
                                            MissingDataError,
                                            Requirement,
                                            RunData,
                                            RunFileError,
                                            find_run_files,
                                            load_run,
)
from lamarckian_hpc.analysis.pareto import (
                                            fronts_by_generation,
                                            hypervolume_by_generation,
                                            pareto_analysis,
                                            pareto_data,
                                            plot_fronts_by_generation,
                                            plot_hypervolume,
                                            plot_pareto_fronts,
)
from lamarckian_hpc.analysis.plotting import Analysis, FigureResult
from lamarckian_hpc.analysis.report import Report, build_report
from lamarckian_hpc.analysis.scaling import (
                                            plot_staleness,
                                            plot_throughput,
                                            plot_tree_vs_flat,
                                            scaling_analysis,
                                            scaling_from_benchmark,
                                            scaling_from_runs,
                                            tree_vs_flat_from_runs,
)
from lamarckian_hpc.analysis.staleness import (
                                            plot_staleness_against_hosts,
                                            plot_staleness_histograms,
                                            staleness_across_runs,
                                            staleness_analysis,
                                            staleness_histogram_data,
)
from lamarckian_hpc.analysis.tables import cpu_utilization_table, markdown_table, run_summary
from lamarckian_hpc.analysis.trajectories import trajectory_analysis

__all__ = [
    "Analysis", "FigureResult", "MissingDataError", "Report", "Requirement", "RunData", "RunFileError",
    "benchmark_table", "build_report", "cpu_utilization_table", "elo_data", "find_benchmark_files", "find_run_files",
    "fronts_by_generation", "hyperparameter_data", "hypervolume_by_generation", "learning_curve_analysis",
    "learning_curve_data", "league_analysis", "league_table", "lineage_analysis", "lineage_edges", "lineage_table",
    "load_benchmarks", "load_run", "markdown_table", "pareto_analysis", "pareto_data", "payoff_data", "plot_elo",
    "plot_fronts_by_generation", "plot_hyperparameters", "plot_hypervolume", "plot_learning_curves", "plot_lineage",
    "plot_pareto_fronts", "plot_payoff", "plot_staleness", "plot_staleness_against_hosts",
    "plot_staleness_histograms", "plot_throughput", "plot_tree_vs_flat", "progress_metric", "run_summary",
    "scaling_analysis", "scaling_from_benchmark", "scaling_from_runs", "staleness_across_runs", "staleness_analysis",
    "staleness_histogram_data", "trajectory_analysis", "tree_vs_flat_from_runs",
]
