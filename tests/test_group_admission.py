"""Under `transport_security: curve`, only ranks that hold the job's broadcast secret form the
learner group: a real TCP store on 127.0.0.1 (the group's rendezvous), each rank in a thread of its
own, proving the secret by an HMAC of rank 0's fresh challenge before any gloo connection."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import torch.distributed as dist

from lamarckian_hpc.runtime.learner.group import (
    CHALLENGE_KEY,
    LearnerGroupError,
    LearnerGroupSpec,
    admit_ranks,
    free_port,
)

SECRET = b"rPf3*b!the-job's-broadcast-secret"


def _admit(secrets_of_ranks: list[bytes]) -> list[BaseException | None]:
    """Every rank's admission, rank 0 first; what each raised (None: admitted)."""
    port = free_port("127.0.0.1")
    world = len(secrets_of_ranks)
    outcome: list[BaseException | None] = [None] * world
    stores = [dist.TCPStore("127.0.0.1", port, world, is_master=True, timeout=timedelta(seconds=10),
                            wait_for_workers=False)]
    stores += [dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=timedelta(seconds=10))
               for _ in range(1, world)]

    def run(rank: int) -> None:
        spec = LearnerGroupSpec(rank, world, "127.0.0.1", port, timeout_seconds=10)
        try:
            admit_ranks(stores[rank], spec, secrets_of_ranks[rank], f"learner rank {rank} of {world}")
        except LearnerGroupError as error:
            outcome[rank] = error

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    return outcome


def test_ranks_that_hold_the_jobs_secret_are_admitted():
    assert _admit([SECRET, SECRET, SECRET]) == [None, None, None]


def test_a_rank_without_the_secret_is_refused_and_every_rank_says_which():
    rank0, rank1, rank2 = _admit([SECRET, SECRET, b"a guess"])
    assert isinstance(rank0, LearnerGroupError) and rank0.ranks == (2,)
    assert "rank(s) [2] did not prove they hold the job's key" in str(rank0)
    assert rank1 is not None and "rank 0 refused rank(s) [2]" in str(rank1)
    assert rank2 is not None and rank2.ranks == (2,)


def test_a_rendezvous_that_does_not_hold_the_secret_is_not_taken_for_rank_0():
    """A process that listens where rank 0 would (or got there first) and admits whoever comes,
    with its own key: the rank does not join it."""
    from lamarckian_hpc.runtime.learner.group import ADMITTED_KEY, PROOF_KEY, _proof

    port = free_port("127.0.0.1")
    rogue = dist.TCPStore("127.0.0.1", port, 2, is_master=True, timeout=timedelta(seconds=10), wait_for_workers=False)
    rank1 = dist.TCPStore("127.0.0.1", port, 2, is_master=False, timeout=timedelta(seconds=10))
    rogue.set(CHALLENGE_KEY, (b"c" * 32).hex())

    def admit_anyone() -> None:
        rogue.wait([PROOF_KEY.format(rank=1)], timedelta(seconds=10))
        rogue.set(ADMITTED_KEY, _proof(b"not the job's", b"c" * 32, 0))

    thread = threading.Thread(target=admit_anyone)
    thread.start()
    with pytest.raises(LearnerGroupError, match="did not prove it is the job's rank 0") as refused:
        admit_ranks(rank1, LearnerGroupSpec(1, 2, "127.0.0.1", port, timeout_seconds=10), SECRET,
                    "learner rank 1 of 2")
    thread.join(10)
    assert refused.value.ranks == (0,)


def test_the_challenge_is_fresh_for_every_group():
    port = free_port("127.0.0.1")
    seen = []
    for _ in range(2):
        store = dist.TCPStore("127.0.0.1", port, 1, is_master=True, timeout=timedelta(seconds=5),
                              wait_for_workers=False)
        admit_ranks(store, LearnerGroupSpec(0, 1, "127.0.0.1", port), SECRET, "learner rank 0 of 1")
        seen.append(store.get(CHALLENGE_KEY))
        del store
        port = free_port("127.0.0.1")
    assert seen[0] != seen[1]
