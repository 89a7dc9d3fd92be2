"""Post-hoc analysis: run files and benchmark results as DataFrames, the paper's figures, and
the Markdown report of `lamarckian-hpc report`. Needs the `analysis` extra (pandas, matplotlib)."""

from lamarckian_hpc.analysis.benchmarks import benchmark_table, find_benchmark_files, load_benchmarks
from lamarckian_hpc.analysis.curves import learning_curve_data, plot_learning_curves, progress_metric
from lamarckian_hpc.analysis.evolution import (hyperparameter_data, lineage_edges, pareto_data, plot_hyperparameters,
                                               plot_lineage, plot_pareto_fronts)
from lamarckian_hpc.analysis.league import elo_data, payoff_data, plot_elo, plot_payoff
from lamarckian_hpc.analysis.loader import RunData, RunFileError, find_run_files, load_run
from lamarckian_hpc.analysis.plotting import FigureResult
from lamarckian_hpc.analysis.report import Report, build_report
from lamarckian_hpc.analysis.scaling import (plot_staleness, plot_throughput, plot_tree_vs_flat, scaling_from_benchmark,
                                             scaling_from_runs, tree_vs_flat_from_runs)
from lamarckian_hpc.analysis.tables import cpu_utilization_table, markdown_table, run_summary

__all__ = [
    "FigureResult", "Report", "RunData", "RunFileError", "benchmark_table", "build_report", "cpu_utilization_table",
    "elo_data", "find_benchmark_files", "find_run_files", "hyperparameter_data", "learning_curve_data",
    "lineage_edges", "load_benchmarks", "load_run", "markdown_table", "pareto_data", "payoff_data", "plot_elo",
    "plot_hyperparameters", "plot_learning_curves", "plot_lineage", "plot_pareto_fronts", "plot_payoff",
    "plot_staleness", "plot_throughput", "plot_tree_vs_flat", "progress_metric", "run_summary",
    "scaling_from_benchmark", "scaling_from_runs", "tree_vs_flat_from_runs",
]
