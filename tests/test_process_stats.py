"""The run's CPU meter: a child's CPU counts, and the process tree is read at most once per interval."""

from __future__ import annotations

import subprocess
import sys
import time

from lamarckian_hpc.runtime.placement.process_stats import TreeCpuMeter

SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def test_the_meter_counts_a_busy_child_and_measures_at_most_once_per_interval() -> None:
    meter = TreeCpuMeter(1, min_interval_seconds=0.5)
    child = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=3)])
    try:
        time.sleep(1.0)
        busy = meter.sample()
        assert busy > 0.3, busy  # the spinning child's CPU, on a shared machine
        assert meter.sample() == busy  # within the interval: the figure already measured
    finally:
        child.kill()
        child.wait()
    time.sleep(0.6)
    quiet = meter.sample()  # a new span: only this (sleeping) process and the child's last moments
    assert quiet != busy and quiet < busy
