"""The cluster install (environment.yml) brings what `lamarckian-hpc launch` and slurm/run.sbatch
need: every package of pyproject.toml's `slurm` extra, from conda or through pip, at versions the
extra allows; mpi4py from conda-forge, built for the system's MPI (an `external_*` placeholder).
srun's MPI plugin is an option of both; and `sbatch slurm/run.sbatch` trains on the Slurm test
cluster (2 nodes) and writes its run file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml
from optional_parts import require_slurm
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "ppo_cartpole.yaml"
# Ends in about 20 s of training: metrics every second, two actors.
TINY_RUN = ["stop.total_env_steps=100000000", "stop.target_return=null", "stop.max_wall_seconds=20",
            "algorithm.batch_size=1024", "runtime.num_actors=2", "storage.metrics_interval_seconds=1",
            "storage.checkpoint_interval_seconds=5"]
EXTERNAL_MPI = re.compile(r"^(mpich|openmpi)=\*=external_\*$")


def _environment() -> tuple[dict[str, str], list[str]]:
    """environment.yml's conda packages (name -> spec after the name) and its pip lines."""
    dependencies = yaml.safe_load((ROOT / "environment.yml").read_text())["dependencies"]
    conda, pip = {}, []
    for entry in dependencies:
        if isinstance(entry, dict):
            pip += entry["pip"]
            continue
        name, _, spec = str(entry).partition("=")
        conda[canonicalize_name(name)] = spec
    return conda, pip


def _extra(name: str) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(text) for text in project["optional-dependencies"][name]]


def _constraints() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if match := re.match(r"^([A-Za-z0-9_.-]+)==([^\s#;]+)", line.strip()):
            pins[canonicalize_name(match.group(1))] = Version(match.group(2))
    return pins


def _pip_extras(pip: list[str]) -> set[str]:
    """The extras of this project that environment.yml's pip section installs (`-e ".[a,b]"`)."""
    extras = set()
    for line in pip:
        if match := re.match(r'^-e\s+"?\.\[([^\]]*)\]"?$', line.strip()):
            extras |= {extra.strip() for extra in match.group(1).split(",")}
    return extras


def test_environment_yml_provides_every_package_of_the_slurm_extra_at_allowed_versions():
    conda, pip = _environment()
    constraints = _constraints()
    through_pip = "slurm" in _pip_extras(pip)
    assert "-c constraints.txt" in [line.strip() for line in pip], "pip installs without constraints.txt"
    for requirement in _extra("slurm"):
        name = canonicalize_name(requirement.name)
        pin = constraints.get(name)
        if name in conda:
            version = conda[name].split("=")[0]
            assert version and "*" not in version, f"environment.yml: {name} from conda without a version"
            assert requirement.specifier.contains(version), \
                f"environment.yml pins {name}={version}, outside pyproject's slurm extra ({requirement})"
            # pip then keeps conda's build instead of installing a PyPI wheel over it
            assert pin is None or pin == Version(version), \
                f"environment.yml pins {name}={version} but constraints.txt {pin}: pip would replace conda's build"
        else:
            assert through_pip, f"environment.yml brings no {name}: neither a conda package nor the slurm extra through pip"
            assert pin is not None and requirement.specifier.contains(pin), \
                f"constraints.txt pins {name} {pin}, outside pyproject's slurm extra ({requirement})"


def test_mpi4py_is_built_for_the_system_mpi():
    conda, _ = _environment()
    assert "mpi4py" in conda, "mpi4py must come from conda-forge, built for an MPI (a PyPI wheel finds any libmpi)"
    mpis = [f"{name}={spec}" for name, spec in conda.items() if name in ("mpich", "openmpi")]
    assert len(mpis) == 1 and EXTERNAL_MPI.match(mpis[0]), \
        f"environment.yml needs exactly one of mpich=*=external_* or openmpi=*=external_* (the system's MPI), got {mpis}"
    text = (ROOT / "environment.yml").read_text()
    assert "openmpi=*=external_*" in text and "pmix" in text, "the Open MPI alternative and its srun plugin are documented"


def test_srun_mpi_plugin_is_an_option_of_launch_and_of_run_sbatch(tmp_path, capsys):
    from lamarckian_hpc.cli import main
    from lamarckian_hpc.cluster.launcher import executor_parameters
    from lamarckian_hpc.config.launch import LaunchConfig

    for plugin in ("pmi2", "pmix"):
        parameters = executor_parameters(LaunchConfig(srun_mpi=plugin, folder=tmp_path / "jobs"))
        assert parameters["srun_args"][0] == f"--mpi={plugin}"
    assert main(["launch", str(CONFIG), "--srun-mpi", "pmi3"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "srun_mpi: Input should be 'pmi2' or 'pmix'" in error, error
    sbatch = (ROOT / "slurm" / "run.sbatch").read_text()
    assert "SRUN_MPI=${SRUN_MPI:-pmi2}" in sbatch and 'srun --mpi="$SRUN_MPI"' in sbatch
    assert "--mpi=pmi2" not in sbatch


def test_run_sbatch_trains_on_two_nodes_and_writes_its_run_file(tmp_path):
    """`sbatch slurm/run.sbatch CONFIG overrides` as a user submits it, on 2 test-cluster nodes: the
    job completes and its run file holds the run's metrics and the hosts it ran on."""
    require_slurm(2)
    from lamarckian_hpc.cluster.scheduler import job_state
    from lamarckian_hpc.storage import open_run

    run_file = tmp_path / "runs" / "run.h5"
    env = {**os.environ, "RUN_FILE": str(run_file), "LOG_DIR": str(tmp_path / "logs"), "PYTHON": sys.executable,
           "SRUN_MPI": "pmi2"}
    submitted = subprocess.run(["sbatch", "--parsable", "--nodes=2", "--cpus-per-task=2", "--time=5",
                                f"--chdir={tmp_path}", f"--output={tmp_path}/job-%j.out",
                                str(ROOT / "slurm" / "run.sbatch"), str(CONFIG), *TINY_RUN],
                               capture_output=True, text=True, timeout=30, env=env)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 240
    while not (state := job_state(job_id)).final:
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], timeout=30)
            pytest.fail(f"job {job_id} still {state.state} after 240 s")
        time.sleep(1)
    output = (tmp_path / f"job-{job_id}.out").read_text(errors="replace")
    assert state.state == "COMPLETED", f"job {job_id} ended {state.state} ({state.exit_code}):\n{output[-4000:]}"
    assert f"run file {run_file}" in output
    with open_run(run_file) as run:
        meta = run.meta
        returns = run.metric("episode_return_mean")
    assert len(returns.value) >= 1 and returns.env_frames[-1] > 0
    assert sorted(meta["hosts"]) == sorted(meta["ray_nodes"]) and len(meta["hosts"]) == 2
