"""The `torch.distributed` group of a policy's learner ranks, as the `GradientReducer` its learners
sum with (`rl.data_parallel`).

Why each choice:
- gloo on CPUs, NCCL only when every rank has a GPU (`choose_backend`): NCCL cannot reduce CPU
  tensors, and one CPU rank would stall the rest; an NCCL group still routes CPU tensors (the counts
  the ranks agree on first) through gloo. A group of GPU and CPU ranks is refused. NCCL waits
  blocking (`nccl_environment`), so its failures raise where gloo's do.
- The rendezvous is a TCP store at rank 0's `address:port`, an address the other hosts reach (from
  discovery), and gloo's sockets are bound on the interface that routes to it (`GLOO_SOCKET_IFNAME`):
  left alone, gloo binds the interface of the host name, often the loopback, and the ranks on other
  hosts then wait for a connection that never comes.
- Every step has a timeout (`timeout_seconds`): the rendezvous, and every collective. A rank that
  does not join or answer ends the group with `LearnerGroupError`, whose one line names the rank(s)
  missing and their address, never a silent hang: after a failed collective each rank posts, in
  the store, which collective it was in, and the ranks that posted nothing are the ones named.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

import psutil
import torch
import torch.distributed as dist
from torch import Tensor

#: How long a rank whose collective failed waits for the others to say where they are, at most.
DIAGNOSIS_SECONDS = 5.0


class LearnerGroupError(RuntimeError):
    """The learner group cannot go on: a rank did not join, did not answer or was lost."""

    def __init__(self, message: str, ranks: Sequence[int] = (), address: str = "") -> None:
        super().__init__(message)
        #: The ranks that did not join or answer (empty when not known).
        self.ranks = tuple(ranks)
        #: The rendezvous, tcp://address:port.
        self.address = address


@dataclass(frozen=True)
class LearnerGroupSpec:
    """One rank's part in forming its group: every rank is given the same `world_size`, `address`
    and `port` (rank 0's, where the rendezvous listens), `backend` and `timeout_seconds`."""

    rank: int
    world_size: int
    address: str
    port: int
    backend: Literal["gloo", "nccl"] = "gloo"
    timeout_seconds: float = 120.0

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank must be in 0..{self.world_size - 1} (world_size {self.world_size}), got {self.rank}")
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        if self.backend not in ("gloo", "nccl"):
            raise ValueError(f"backend must be gloo or nccl, got {self.backend!r}")
        if self.timeout_seconds <= 0:
            raise ValueError(f"timeout_seconds must be > 0, got {self.timeout_seconds}")

    @property
    def rendezvous(self) -> str:
        return f"tcp://{self.address}:{self.port}"


def choose_backend(ranks_have_gpu: Iterable[bool]) -> Literal["gloo", "nccl"]:
    """NCCL when every rank has a GPU (and this torch has NCCL), gloo when none has. A group of
    both is refused: its GPU ranks would step the fused Adam and its CPU ranks the plain one, whose
    weights part in the last bits after one step, and nothing would bring them together again."""
    gpus = list(ranks_have_gpu)
    if any(gpus) and not all(gpus):
        on_gpu = [rank for rank, gpu in enumerate(gpus) if gpu]
        on_cpu = [rank for rank, gpu in enumerate(gpus) if not gpu]
        raise LearnerGroupError(
            f"runtime.device: learner ranks {on_gpu} learn on a GPU and ranks {on_cpu} on CPUs; a learner group "
            "learns on one kind of device: set runtime.device=cpu (allowed: auto, cpu, cuda), or place every "
            "rank on a node with a GPU (runtime.learner_placement: spread or pack)", on_cpu)
    return "nccl" if gpus and all(gpus) and dist.is_nccl_available() else "gloo"


def nccl_environment(interface: str) -> dict[str, str]:
    """The NCCL settings of a rank, set before its group is formed. Blocking wait: a collective
    that fails or outlives the group's timeout raises in the thread that called it, so the rank
    names the rank lost and rank 0 saves its checkpoint, where NCCL's default (its watchdog tears
    the process down, TORCH_NCCL_ASYNC_ERROR_HANDLING=3) ends rank 0 with neither. NCCL's sockets
    on the interface that routes to the rendezvous, as gloo's. A value the user set is kept."""
    wanted = {"TORCH_NCCL_BLOCKING_WAIT": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0",
              "NCCL_SOCKET_IFNAME": interface}
    return {name: os.environ.get(name, value) for name, value in wanted.items()}


def free_port(host: str) -> int:
    """A TCP port free on `host`'s interface now (the OS's pick; free until someone else binds it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def local_address_toward(address: str) -> str:
    """This host's address on the route to `address` (a UDP connect sends nothing)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((address, 9))
        return str(probe.getsockname()[0])


def interface_of(address: str) -> str | None:
    """The name of the network interface that holds `address`, if any on this host."""
    for name, addresses in psutil.net_if_addrs().items():
        if any(entry.address.split("%")[0] == address for entry in addresses):
            return name
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


CHALLENGE_KEY = "admission/challenge"
PROOF_KEY = "admission/proof/{rank}"
ADMITTED_KEY = "admission/admitted"
REFUSED_KEY = "admission/refused"


def _proof(secret: bytes, challenge: bytes, rank: int) -> str:
    return hmac.new(secret, b"lamarckian-hpc learner rank %d " % rank + challenge, hashlib.sha256).hexdigest()


def admit_ranks(store: dist.Store, spec: LearnerGroupSpec, secret: bytes, where: str) -> None:
    """Only ranks that hold the job's secret form the group: under `transport_security: curve`
    every rank proves it holds the broadcast secret (rank 0 and the ranks have it, actors do not)
    by an HMAC of a fresh challenge of rank 0's, and rank 0 answers with its own, before any gloo
    or NCCL connection is made. The store and the group's traffic are not encrypted (see the
    security page): this admits the job's ranks and no one else; it does not hide the gradients."""
    timeout = timedelta(seconds=spec.timeout_seconds)
    if spec.rank == 0:
        challenge = secrets.token_bytes(32)
        store.set(CHALLENGE_KEY, challenge.hex())
        proofs = [PROOF_KEY.format(rank=rank) for rank in range(1, spec.world_size)]
        try:
            store.wait(proofs, timeout)
        except Exception as error:  # noqa: BLE001 - torch raises several kinds
            missing = [rank for rank, key in enumerate(proofs, start=1) if not _has(store, key)]
            raise LearnerGroupError(f"{where}: rank(s) {missing} sent no proof of the job's key within "
                                    f"{spec.timeout_seconds:g} s", missing, spec.rendezvous) from error
        refused = [rank for rank, key in enumerate(proofs, start=1)
                   if not hmac.compare_digest(store.get(key).decode(), _proof(secret, challenge, rank))]
        if refused:
            store.set(REFUSED_KEY, " ".join(map(str, refused)))
            raise LearnerGroupError(f"{where}: rank(s) {refused} did not prove they hold the job's key "
                                    "(runtime.transport_security: curve); the group is not formed", refused,
                                    spec.rendezvous)
        store.set(ADMITTED_KEY, _proof(secret, challenge, 0))
        return
    try:
        store.wait([CHALLENGE_KEY], timeout)
    except Exception as error:  # noqa: BLE001
        raise LearnerGroupError(f"{where}: rank 0 sent no challenge within {spec.timeout_seconds:g} s", (0,),
                                spec.rendezvous) from error
    challenge = bytes.fromhex(store.get(CHALLENGE_KEY).decode())
    store.set(PROOF_KEY.format(rank=spec.rank), _proof(secret, challenge, spec.rank))
    deadline = time.monotonic() + spec.timeout_seconds
    while not (_has(store, ADMITTED_KEY) or _has(store, REFUSED_KEY)):
        if time.monotonic() > deadline:
            raise LearnerGroupError(f"{where}: rank 0 did not admit this rank within {spec.timeout_seconds:g} s",
                                    (0,), spec.rendezvous)
        time.sleep(0.05)
    if _has(store, REFUSED_KEY):
        refused = [int(rank) for rank in store.get(REFUSED_KEY).decode().split()]
        raise LearnerGroupError(f"{where}: rank 0 refused rank(s) {refused}, which did not prove they hold the "
                                "job's key", refused, spec.rendezvous)
    if not hmac.compare_digest(store.get(ADMITTED_KEY).decode(), _proof(secret, challenge, 0)):
        raise LearnerGroupError(f"{where}: the rendezvous at {spec.rendezvous} did not prove it is the job's "
                                "rank 0 (it does not hold the job's key)", (0,), spec.rendezvous)


def form_group(spec: LearnerGroupSpec, secret: bytes | None = None) -> TorchDistributedReducer:
    """Join the group of `spec` (every rank calls this) and return its reducer. Raises
    `LearnerGroupError` naming the ranks that did not join within `spec.timeout_seconds`. With
    `secret` (the job's broadcast secret, under CURVE), only ranks that hold it are admitted."""
    timeout = timedelta(seconds=spec.timeout_seconds)
    where = f"learner rank {spec.rank} of {spec.world_size}"
    local = local_address_toward(spec.address)
    interface = interface_of(local)
    if interface is None:
        raise LearnerGroupError(f"{where}: no interface of this host holds {local}, its address toward the "
                                f"rendezvous {spec.rendezvous}", (), spec.rendezvous)
    os.environ["GLOO_SOCKET_IFNAME"] = interface
    if spec.backend == "nccl":
        os.environ.update(nccl_environment(interface))
    host = socket.gethostname()
    started = time.monotonic()
    try:
        store = dist.TCPStore(spec.address, spec.port, spec.world_size, is_master=spec.rank == 0, timeout=timeout,
                              wait_for_workers=False)
    except Exception as error:  # noqa: BLE001 - torch raises several kinds (DistNetworkError, RuntimeError)
        if spec.rank == 0:
            raise LearnerGroupError(f"{where} ({host} {local}): cannot listen for the rendezvous at "
                                    f"{spec.rendezvous}: {_first_line(error)}", (), spec.rendezvous) from error
        raise LearnerGroupError(f"{where} ({host} {local}): rank 0's rendezvous at {spec.rendezvous} did not answer "
                                f"within {spec.timeout_seconds:g} s: {_first_line(error)}", (0,),
                                spec.rendezvous) from error
    store.set(f"joined/{spec.rank}", f"{host} {local}")
    keys = [f"joined/{rank}" for rank in range(spec.world_size)]
    left = spec.timeout_seconds - (time.monotonic() - started)
    try:
        store.wait(keys, timedelta(seconds=max(left, 0.001)))
    except Exception as error:  # noqa: BLE001
        missing = [rank for rank, key in enumerate(keys) if not _has(store, key)]
        raise LearnerGroupError(f"{where} ({host} {local}): rank(s) {missing} did not join the rendezvous at "
                                f"{spec.rendezvous} within {spec.timeout_seconds:g} s", missing,
                                spec.rendezvous) from error
    if secret is not None:
        admit_ranks(store, spec, secret, f"{where} ({host} {local})")
    backend = "cpu:gloo,cuda:nccl" if spec.backend == "nccl" else "gloo"
    reducer = TorchDistributedReducer(spec, store, f"{host} {local}")
    started = time.monotonic()
    try:
        dist.init_process_group(backend=backend, store=dist.PrefixStore("group", store), rank=spec.rank,
                                world_size=spec.world_size, timeout=timeout)
    except Exception as error:  # noqa: BLE001 - a rank lost between the rendezvous and the connections
        raise reducer._failure("connect", error, time.monotonic() - started) from error
    return reducer


def _has(store: dist.Store, key: str) -> bool:
    try:
        return bool(store.check([key]))
    except Exception:  # noqa: BLE001 - the store's host is gone
        return False


class TorchDistributedReducer:
    """`rl.data_parallel.GradientReducer` over the process's default `torch.distributed` group."""

    def __init__(self, spec: LearnerGroupSpec, store: dist.Store, where: str) -> None:
        self.spec, self.store, self.where = spec, store, where
        self.rank, self.world_size = spec.rank, spec.world_size
        #: Collectives run so far (the number a failure names), and the seconds spent in them (waiting
        #: for the slowest rank included): what an update pays for being shared.
        self.collectives = 0
        self.collective_seconds = 0.0

    def all_gather_counts(self, count: int) -> list[int]:
        mine = torch.tensor([count], dtype=torch.int64)
        counts = [torch.zeros_like(mine) for _ in range(self.world_size)]
        self._run("all_gather_counts", lambda: dist.all_gather(counts, mine))
        return [int(value) for value in counts]

    def all_reduce_sum_(self, tensors: Sequence[Tensor]) -> None:
        """One flat buffer per (dtype, device) among `tensors` (one, for a model's gradients)."""
        groups: dict[tuple[torch.dtype, torch.device], list[Tensor]] = {}
        for tensor in tensors:
            groups.setdefault((tensor.dtype, tensor.device), []).append(tensor)
        for members in groups.values():
            if len(members) == 1 and members[0].is_contiguous():
                self._run("all_reduce", lambda members=members: dist.all_reduce(members[0]))
                continue
            flat = torch.cat([member.reshape(-1) for member in members])
            self._run("all_reduce", lambda flat=flat: dist.all_reduce(flat))
            offset = 0
            for member in members:
                member.copy_(flat[offset : offset + member.numel()].view_as(member))
                offset += member.numel()

    def close(self) -> None:
        """Leave the group (the process may form another one after)."""
        if dist.is_initialized():
            dist.destroy_process_group()

    def _run(self, name: str, collective: Callable[[], object]) -> None:
        self.collectives += 1
        started = time.monotonic()
        try:
            collective()
        except Exception as error:  # noqa: BLE001 - gloo and NCCL raise RuntimeError and DistError kinds
            raise self._failure(name, error, time.monotonic() - started) from error
        self.collective_seconds += time.monotonic() - started

    def _failure(self, name: str, error: BaseException, elapsed: float) -> LearnerGroupError:
        """Which ranks did not reach the failed collective: each rank that failed posts its number,
        and those that have not posted within a short wait are named."""
        spec = self.spec
        number = self.collectives
        others = [rank for rank in range(self.world_size) if rank != self.rank]
        missing: list[int] = []
        addresses: dict[int, str] = {}
        try:
            self.store.set_timeout(timedelta(seconds=min(spec.timeout_seconds, DIAGNOSIS_SECONDS)))
            self.store.set(f"failed/{self.rank}", str(number))
            deadline = time.monotonic() + min(spec.timeout_seconds / 2, DIAGNOSIS_SECONDS)
            missing = [rank for rank in others if not _has(self.store, f"failed/{rank}")]
            while missing and time.monotonic() < deadline:
                time.sleep(0.05)
                missing = [rank for rank in missing if not _has(self.store, f"failed/{rank}")]
            for rank in missing:
                addresses[rank] = self.store.get(f"joined/{rank}").decode()
        except Exception:  # noqa: BLE001 - rank 0, which holds the store, is gone
            missing = missing or [0]
        named = ", ".join(f"{rank} ({addresses[rank]})" if rank in addresses else str(rank) for rank in missing)
        who = (f"rank(s) {named} did not reach it" if missing
               else "every rank reached it (a broken connection)")
        return LearnerGroupError(
            f"learner rank {self.rank} of {self.world_size} ({self.where}): {name} #{number} failed after "
            f"{elapsed:.1f} s (timeout {spec.timeout_seconds:g} s): {who}; group at {spec.rendezvous}: "
            f"{_first_line(error)}", missing, spec.rendezvous)
