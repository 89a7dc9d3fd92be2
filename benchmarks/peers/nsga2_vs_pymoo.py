"""Our NSGA-II against pymoo's, on the same problems, seeds and budgets, in one run.

Population 100; ZDT1, ZDT2 and ZDT3 (30 variables) for 200 generations and DTLZ2 (3 objectives,
12 variables) for 250; 5 seeds each. Generations are counted as pymoo counts them (the random
initial population is generation 1). Reports hypervolume (reference point 1.1 per objective) and
IGD against pymoo's Pareto front, mean and std, and wall time per generation.

    python benchmarks/peers/nsga2_vs_pymoo.py [--seeds 5]

Prints a Markdown table and writes benchmarks/results/nsga2_vs_pymoo.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from pymoo.algorithms.moo.nsga2 import NSGA2 as PymooNSGA2
from pymoo.optimize import minimize
from pymoo.problems import get_problem
from pymoo.util.ref_dirs import get_reference_directions

from benchmarks import common
from lamarckian_hpc.ec import NSGA2, dtlz2, hypervolume, inverted_generational_distance, zdt

RESULTS = Path(__file__).resolve().parents[1] / "results" / "nsga2_vs_pymoo.json"
CASES = [("zdt1", zdt(1), 200), ("zdt2", zdt(2), 200), ("zdt3", zdt(3), 200), ("dtlz2", dtlz2(), 250)]


def pareto_front(name: str):
    problem = get_problem(name)
    if name == "dtlz2":
        return problem.pareto_front(get_reference_directions("das-dennis", 3, n_partitions=15))
    return problem.pareto_front()


def run_ours(problem, generations: int, seed: int) -> tuple[np.ndarray, float]:
    algorithm = NSGA2(problem.lower, problem.upper, 100, np.random.default_rng(seed))
    start = time.perf_counter()
    for _ in range(generations):
        genomes = algorithm.ask()
        algorithm.tell(genomes, problem.evaluate(genomes))
    return algorithm.objectives, (time.perf_counter() - start) / generations


def run_pymoo(name: str, generations: int, seed: int) -> tuple[np.ndarray, float]:
    problem = get_problem(name, n_var=12) if name == "dtlz2" else get_problem(name)
    start = time.perf_counter()
    result = minimize(problem, PymooNSGA2(pop_size=100), ("n_gen", generations), seed=seed, verbose=False)
    return result.pop.get("F"), (time.perf_counter() - start) / generations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--output", type=Path, default=RESULTS)
    common.add_common_args(parser)
    args = parser.parse_args()
    rows = []
    for name, problem, generations in CASES:
        front = pareto_front(name)
        reference = np.full(problem.num_objectives, 1.1)
        for side in ("ours", "pymoo"):
            hv, igd, seconds = [], [], []
            for seed in range(args.seeds):
                objectives, per_generation = (run_ours(problem, generations, seed) if side == "ours"
                                              else run_pymoo(name, generations, seed))
                hv.append(hypervolume(objectives, reference))
                igd.append(inverted_generational_distance(objectives, front))
                seconds.append(per_generation)
            rows.append({"problem": problem.name, "side": side, "generations": generations, "hv": hv, "igd": igd,
                         "seconds_per_generation": seconds})
            print(f"{problem.name} {side}: HV {np.mean(hv):.4f}", flush=True)

    print("\n| problem | side | HV mean | HV std | IGD mean | IGD std | ms / generation |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['problem']} | {row['side']} | {np.mean(row['hv']):.4f} | {np.std(row['hv']):.4f} | "
              f"{np.mean(row['igd']):.4f} | {np.std(row['igd']):.4f} | {1000 * np.mean(row['seconds_per_generation']):.2f} |")
    print("\nTargets: HV >= pymoo's mean - 1%, time per generation <= pymoo's")
    for ours, theirs in zip(rows[::2], rows[1::2]):
        hv_ok = np.mean(ours["hv"]) >= 0.99 * np.mean(theirs["hv"])
        time_ratio = np.mean(ours["seconds_per_generation"]) / np.mean(theirs["seconds_per_generation"])
        print(f"- {ours['problem']}: HV {'met' if hv_ok else 'MISSED'} "
              f"({np.mean(ours['hv']):.4f} vs {np.mean(theirs['hv']):.4f}); time ratio {time_ratio:.2f} "
              f"({'met' if time_ratio <= 1 else 'MISSED'})")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, {"rows": rows}, args.label)
    print(f"\nwritten: {args.output}")


if __name__ == "__main__":
    main()
