"""The devices of a learner group: one kind of device per group, and NCCL set up to fail where gloo
does (a failed or hung collective raises in the rank's thread, so the rank lost is named and rank 0
checkpoints) instead of its watchdog tearing the process down. NCCL's collectives themselves need
GPUs, which these tests do not have."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch.distributed as dist

from lamarckian_hpc.runtime.learner.group import (
    LearnerGroupError,
    choose_backend,
    nccl_environment,
)


def test_a_group_of_gpu_and_cpu_ranks_is_refused_with_the_setting_to_change():
    with pytest.raises(LearnerGroupError, match=r"runtime.device: learner ranks \[0, 2\] learn on a GPU and ranks "
                                                r"\[1\] on CPUs.*runtime.device=cpu \(allowed: auto, cpu, cuda\)") as refused:
        choose_backend([True, False, True])
    assert refused.value.ranks == (1,)
    assert choose_backend([False, False]) == "gloo"
    assert choose_backend([True, True]) == ("nccl" if dist.is_nccl_available() else "gloo")


def test_nccl_waits_blocking_on_the_rendezvous_interface_unless_the_user_said_otherwise(monkeypatch):
    for name in ("TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_SOCKET_IFNAME"):
        monkeypatch.delenv(name, raising=False)
    assert nccl_environment("ib0") == {"TORCH_NCCL_BLOCKING_WAIT": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0",
                                       "NCCL_SOCKET_IFNAME": "ib0"}
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth1")
    assert nccl_environment("ib0")["NCCL_SOCKET_IFNAME"] == "eth1"


def test_an_nccl_rank_sets_its_environment_before_the_group_is_formed(tmp_path):
    """In a process of its own (the settings are the process's): whether or not this torch has NCCL,
    the settings are in place by the time the group is formed, on the interface of the rendezvous."""
    script = """
import os, sys
from lamarckian_hpc.runtime.learner.group import LearnerGroupError, LearnerGroupSpec, form_group, free_port
spec = LearnerGroupSpec(0, 1, "127.0.0.1", free_port("127.0.0.1"), "nccl", 10)
try:
    form_group(spec)
except LearnerGroupError:
    pass  # a torch without NCCL cannot connect it
print(os.environ["TORCH_NCCL_BLOCKING_WAIT"], os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"],
      os.environ["NCCL_SOCKET_IFNAME"] == os.environ["GLOO_SOCKET_IFNAME"])
"""
    env = {name: value for name, value in os.environ.items() if not name.startswith(("TORCH_NCCL", "NCCL_"))}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "0", "True"]


def test_the_driver_keeps_the_head_nodes_first_gpu_and_ray_hands_out_the_others():
    from lamarckian_hpc.cluster.ray_cluster import gpus_left_to_ray

    assert gpus_left_to_ray(4, None) == (3, "1,2,3")
    assert gpus_left_to_ray(2, "5,7") == (1, "7")  # Slurm's binding: the driver learns on 5
    assert gpus_left_to_ray(1, "0") == (0, "")
    assert gpus_left_to_ray(0, None) == (0, "")


@pytest.mark.second_pass  # a Ray of its own: about 15 s on two cores
def test_a_learner_rank_on_the_head_is_given_a_gpu_other_than_the_drivers(tmp_path):
    """A real Ray head started as a job's head is (the GPUs are declared, none is opened): a rank
    asking for one GPU is handed device 1, never the driver's device 0."""
    script = """
import os, ray
from lamarckian_hpc.cluster.ray_cluster import gpus_left_to_ray
count, visible = gpus_left_to_ray(2, None)
os.environ["CUDA_VISIBLE_DEVICES"] = visible  # as the head's raylet is started
ray.init(num_cpus=1, num_gpus=count, include_dashboard=False)

@ray.remote(num_gpus=1, num_cpus=0)
def rank_devices():
    return os.environ.get("CUDA_VISIBLE_DEVICES")

print(ray.get(rank_devices.remote()))
ray.shutdown()
"""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "1"
