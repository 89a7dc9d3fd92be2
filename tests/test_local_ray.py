"""The run's own Ray: lean (only the processes a run on one machine uses: no autoscaler monitor, log
monitor or API server), private to the run, and gone with everything it started when the run ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Starts the run's Ray, runs a task, lists the processes Ray started, shuts Ray down and lists what is left.
SCRIPT = textwrap.dedent("""
    import json, os, psutil, ray
    from lamarckian_hpc.runtime.placement.ray_setup import ensure_ray, shutdown_ray

    assert ensure_ray(None, 2)
    assert ray.get(ray.remote(lambda: 6 * 7).remote()) == 42
    started = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
    temp = ray._private.worker._global_node.get_temp_dir_path()
    shutdown_ray()
    left = [p.pid for p in psutil.Process().children(recursive=True) if p.is_running() and p.status() != "zombie"]
    print(json.dumps({"started": started, "left": left, "temp_exists": os.path.exists(temp)}))
""")


def test_the_local_ray_is_lean_and_gone_after_the_run() -> None:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=180,
                          env=environment, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    started = report["started"]
    assert any("gcs_server" in command for command in started) and any("raylet" in command for command in started)
    for left_out in ("autoscaler/_private/monitor.py", "_private/log_monitor.py", "dashboard/dashboard.py"):
        assert not any(left_out in command for command in started), f"{left_out} was started"
    assert report["left"] == [] and not report["temp_exists"]


#: Starts the Ray ahead while a thread imports torch, as `lamarckian-hpc train` does, and checks who owns it.
AHEAD = textwrap.dedent("""
    import json, sys, psutil, ray
    from lamarckian_hpc.runtime.placement import ray_setup

    report = {"torch_before": "torch" in sys.modules}
    ray_setup.start_ray_while_importing(None, 2, modules=("torch", "no_such_module_here"))
    report["torch_after"] = "torch" in sys.modules  # the failed import is left for the caller to raise
    report["up"] = ray.is_initialized()
    report["first_owns"] = ray_setup.ensure_ray(None, 2)  # the trainer's call takes the Ray over
    report["second_owns"] = ray_setup.ensure_ray(None, 2)  # a second caller does not own it
    ray_setup.shutdown_unclaimed_ray()  # claimed: nothing to do
    report["still_up"] = ray.is_initialized()
    ray_setup.shutdown_ray()
    ray_setup.start_ray_while_importing(None, 2, modules=())
    ray_setup.shutdown_unclaimed_ray()  # its trainer never came: this Ray goes
    report["unclaimed_gone"] = not ray.is_initialized()
    report["left"] = [p.pid for p in psutil.Process().children(recursive=True) if p.is_running() and p.status() != "zombie"]
    print(json.dumps(report))
""")


def test_a_ray_started_while_torch_imports_belongs_to_the_trainer_that_takes_it_over() -> None:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    done = subprocess.run([sys.executable, "-c", AHEAD], capture_output=True, text=True, timeout=240,
                          env=environment, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"torch_before": False, "torch_after": True, "up": True, "first_owns": True,
                      "second_owns": False, "still_up": True, "unclaimed_gone": True, "left": []}


#: Starts the run's Ray, places two sampling actors as a run does, and reports the worker
#: processes the raylet started (from its log) and what the actors' processes see.
WORKERS = textwrap.dedent("""
    import json, os, ray
    from lamarckian_hpc.runtime.placement.ray_setup import ensure_ray, shutdown_ray, worker_runtime_env

    assert ensure_ray(None, 2)

    @ray.remote(num_cpus=1)
    class Sampler:
        def facts(self):
            return os.getpid(), os.environ.get("OMP_NUM_THREADS"), os.environ.get("OPENBLAS_NUM_THREADS")

    samplers = [Sampler.options(runtime_env=worker_runtime_env()).remote() for _ in range(2)]
    facts = ray.get([sampler.facts.remote() for sampler in samplers])
    log = os.path.join(ray._private.worker._global_node.get_logs_dir_path(), "raylet.out")
    with open(log) as lines:
        started = [int(line.split("with pid")[1].split()[0]) for line in lines if "Started worker process" in line]
    shutdown_ray()
    print(json.dumps({"facts": facts, "started": started, "runtime_env": worker_runtime_env()}))
""")


def test_actors_on_the_runs_own_ray_take_the_workers_ray_started_ahead_with_one_thread_each() -> None:
    """No second pair of worker processes starts for the actors (a runtime env of their own would
    start one, while the learner starts), and each worker runs one BLAS/OpenMP thread."""
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("RAY_") and not key.endswith("_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", WORKERS], capture_output=True, text=True, timeout=180,
                          env=environment, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(pid for pid, _, _ in report["facts"]) == sorted(report["started"]), report
    assert all(threads == ["1", "1"] for _, *threads in report["facts"]), report
    # After shutdown: a joined cluster's, which carries this process's PYTHONPATH to the actors.
    python_path = {"PYTHONPATH": environment["PYTHONPATH"]} if environment.get("PYTHONPATH") else {}
    assert report["runtime_env"] == {"env_vars": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                                                  "OPENBLAS_NUM_THREADS": "1", **python_path}}


def test_an_environment_the_run_cannot_make_fails_before_its_ray_starts(monkeypatch) -> None:
    """A bad env id is one ValueError from `make_trainer` before any Ray starts (it used to come after
    Ray's start-up and shutdown, seconds later)."""
    from lamarckian_hpc.config import load_config
    from lamarckian_hpc.runtime.placement import ray_setup
    from lamarckian_hpc.runtime.runners.training_run import make_trainer

    started = []
    monkeypatch.setattr(ray_setup, "start_ray_while_importing", lambda *args, **kwargs: started.append(args))
    config = load_config(ROOT / "configs" / "ppo_cartpole.yaml", ["runtime.mode=ray", "env.id=NoSuchEnv-v0"])
    with pytest.raises(ValueError, match="cannot make Gymnasium environment 'NoSuchEnv-v0'"):
        make_trainer(config)
    assert started == []
