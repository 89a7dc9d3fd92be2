"""The socket sequence that aborted a learner's process in libzmq 4.3.5 (`Resource temporarily
unavailable (src/session_base.cpp:233)`), repeated: a `WeightPublisher` is closed while its
connections are part way through a weights message (a large array frame with more frames after
it), and its subscribers' connections drop at about the same moment, as when a run ends and its
actors are killed. Run as a script in a process of its own, since libzmq aborts the process:

    python tests/publisher_close.py [--iterations 200] [--linger-ms MS]

`--linger-ms` closes with that linger in place of the publisher's own (0 shows the abort). Exits 0
after the last iteration; an abort ends it with SIGABRT.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import numpy as np
import zmq

from lamarckian_hpc.comm import WEIGHTS_TOPIC, WeightPublisher

SUBSCRIBERS = 2
#: Messages each subscriber is sent and does not read: with the buffers below, every connection of
#: the publisher is still writing one of them (its large frame, a frame with more after it) at close.
MESSAGES = 6
WEIGHTS = {"first": np.ones(16, np.float32), "large": np.zeros(1 << 20, np.float32),  # 4 MB, as staleness.py's
           "last": np.ones(4, np.float32)}


def close_once(rng: random.Random, linger_ms: int | None) -> None:
    publishing = zmq.Context()
    subscribing = zmq.Context()
    publisher = WeightPublisher(publishing)
    publisher.socket.setsockopt(zmq.SNDBUF, 64 * 1024)  # before anyone connects: the connections take it
    subscribers = []
    for _ in range(SUBSCRIBERS):
        subscriber = subscribing.socket(zmq.SUB)
        subscriber.setsockopt(zmq.LINGER, 0)
        subscriber.setsockopt(zmq.RCVHWM, 1)
        subscriber.setsockopt(zmq.RCVBUF, 4096)
        subscriber.setsockopt(zmq.SUBSCRIBE, WEIGHTS_TOPIC)
        subscriber.connect(publisher.address)
        subscribers.append(subscriber)
    joined = 0
    while joined < SUBSCRIBERS and publisher.socket.poll(5000):
        joined += publisher.socket.recv() == b"\x01" + WEIGHTS_TOPIC
    if joined < SUBSCRIBERS:
        raise SystemExit(f"only {joined} of {SUBSCRIBERS} subscribers joined")
    for version in range(MESSAGES):
        publisher.publish(version, WEIGHTS)
    time.sleep(0.01)  # every connection is now stuck in a message: its subscriber reads nothing
    if linger_ms is not None:
        publisher.socket.setsockopt(zmq.LINGER, linger_ms)
        publisher.socket.close()
    else:
        publisher.close()
    if rng.random() < 0.5:  # the subscribers' connections drop at once, or a moment later
        time.sleep(rng.random() / 1000)
    for subscriber in subscribers:
        subscriber.close()
    subscribing.term()
    publishing.term()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--linger-ms", type=int, default=None,
                        help="close with this linger instead of WeightPublisher.close's")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    for _ in range(args.iterations):
        close_once(rng, args.linger_ms)
    print(f"closed {args.iterations} publishers without an abort", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
