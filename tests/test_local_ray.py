"""The run's own Ray: lean (only the processes a run on one machine uses: no autoscaler monitor, log
monitor or API server), private to the run, and gone with everything it started when the run ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Starts the run's Ray, runs a task, lists the processes Ray started, shuts Ray down and lists what is left.
SCRIPT = textwrap.dedent("""
    import json, os, psutil, ray
    from lamarckian_hpc.runtime.ray_setup import ensure_ray, shutdown_ray

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
