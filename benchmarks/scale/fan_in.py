"""Many actors into one learner: what 100, 1,000 and 6,000 connections cost it, direct and relayed.

Everything on the way is the run's own: the job's CURVE keys (`JobKeys.create`, the learner's
secret made in the learner's process), one `ExperienceSender` per simulated actor with its own
routing id and CURVE handshake, the learner's `ExperienceReceiver` with the credit budget the
runtime gives that many actors (`runtime.run_shape.credit_budget`, each actor's `credit_window`),
real experience messages on the wire format, and for `relayed` the runtime's `Relay` processes
(`spawn_relay_addresses`) in the tree `build_tree` makes. Only the sampling is simulated:

- calibration: one real CartPole actor side (`make_sampling_side` on configs/ppo_cartpole.yaml)
  samples `message_steps` steps per message and encodes each message, as an actor does; its
  messages per CPU second are the rate of one actor core, and its last message is the one every
  simulated actor sends (its actor index and sequence its own);
- simulated actors: `--processes` spawned processes share the connections. An actor says hello,
  asks for its window, and, each time it holds a credit, "samples" for 1/rate seconds and then
  sends the message credited, as `runtime.actor.loop.ActorLoop` does (`--rate 0`: at once);
- the learner: its own process, pinned to CPU 0 (the others run on the remaining CPUs, standing
  for the actors' nodes), with the runtime's descriptor limit and I/O threads for that many actors
  (`raise_open_file_limit`, `io_threads_for`), receiving and reading every message as fast as it can.
- relayed: one relay per simulated node of `--actors-per-node` actors (40 cores a node, as on the
  target cluster), at most `--max-relays` of them, since each is a process on this machine; the
  learner's node holds the learner alone; a node's actors reach its relay over IPC, relays reach
  their parent over TCP, second-layer relays where `build_tree` puts them. The relays bundle what
  comes up for `--bundle-wait-ms` (the runtime's `runtime.relay_bundle_ms`, `comm.bundle`);
  `relayed-unbundled` is the same tree with relays that forward message by message (0 ms), as they
  did before bundles: the before and after of one run.

Per case: the handshake (from the moment the actor processes start connecting until every actor
has held a credit, and until the learner heard every hello), then a `--seconds` window in which the
rollouts (experience messages) and env steps the learner ingested per second, the ZeroMQ messages it
took off its socket per second (a bundle is one), its CPU (process CPU seconds / wall: ZeroMQ's I/O
and CURVE threads included) and CPU per env frame, the credits in flight, its RSS, peak RSS and open descriptors are read,
and the connections it holds: distinct first routing frames in its credit ledger (an actor's own id
direct, a first-layer relay's id relayed) beside the established TCP connections on its port.
`--ulimit` adds direct runs of the largest count with the learner started under `ulimit -n 1024`:
soft only (the learner raises it, as the runtime does) and hard too (it cannot).

    python benchmarks/scale/fan_in.py [--actors 100 1000 6000] [--modes direct relayed-unbundled relayed] [--seconds 12]
                                [--processes 4] [--rate R] [--message-steps S] [--no-ulimit]

Prints a Markdown table and writes benchmarks/results/fan_in.json (`--output`).
"""

from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")  # one core per process, as an actor has

import argparse  # noqa: E402
import heapq  # noqa: E402
import math  # noqa: E402
import multiprocessing  # noqa: E402
import resource  # noqa: E402
import select  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import zmq  # noqa: E402

from benchmarks import common  # noqa: E402
from lamarckian_hpc.comm import (  # noqa: E402
    BROADCAST,
    LEARNER,
    ExperienceReceiver,
    ExperienceSender,
    JobKeys,
    Message,
    WeightPublisher,
    encode,
    stop_authenticator,
)
from lamarckian_hpc.comm.limits import io_threads_for, raise_open_file_limit  # noqa: E402
from lamarckian_hpc.comm.relay import RelaySpec, spawn_relay_addresses  # noqa: E402
from lamarckian_hpc.comm.topology import build_tree  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "fan_in.json"
CONFIG = ROOT / "configs" / "ppo_cartpole.yaml"
CONTROL_EVERY_S = 0.1  # how often the learner and actor processes look at their pipe
REASK_EVERY_S = 5.0  # actors without a credit call take_credit this often (it re-asks after 30 s)


def _pin(cpus: list[int] | None) -> None:
    if cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cpus)


# ---------------------------------------------------------------- calibration: one real actor core
def calibrate(num_actors: int, seconds: float, message_steps_override: int | None) -> tuple[dict[str, Any], Message]:
    """Messages per CPU second one actor core samples and encodes, and the real message to send."""
    from lamarckian_hpc.config import load_config
    from lamarckian_hpc.runtime.actor.sides import make_sampling_side
    from lamarckian_hpc.runtime.messages import experience_message
    from lamarckian_hpc.runtime.run_shape import message_steps

    config = load_config(CONFIG, [])
    steps = message_steps_override or message_steps(config, num_actors)
    side = make_sampling_side(config, seed=0)
    frames_before, messages, message_bytes = 0, 0, 0
    message = None
    wall, cpu = time.monotonic(), time.process_time()
    while time.monotonic() - wall < seconds or messages < 10:
        side.sample(steps)
        (_, batch, completed), = side.take_experience()
        frames = side.sampler.env_frames
        message = experience_message(0, batch, np.array([r.episode_return for r in completed]),
                                     np.array([r.length for r in completed], dtype=np.int64),
                                     frames - frames_before, sequence=messages)
        message_bytes = sum(memoryview(frame).nbytes for frame in encode(message))
        frames_before, messages = frames, messages + 1
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    side.close()
    assert message is not None
    return {"config": CONFIG.name, "env_id": config.env.id, "num_envs": config.env.num_envs, "message_steps": steps,
            "message_bytes": message_bytes, "messages": messages, "cpu_seconds": round(cpu, 3),
            "messages_per_cpu_second": round(messages / cpu, 1), "messages_per_wall_second": round(messages / wall, 1),
            "env_steps_per_cpu_second": round(messages * steps / cpu)}, message


# ---------------------------------------------------------------- the learner (its own process)
def learner_main(spec: dict[str, Any], conn: Any) -> None:
    from lamarckian_hpc.runtime.messages import EXPERIENCE, HELLO, KINDS, read_experience

    _pin(spec["cpus"])
    if spec["nofile"] is not None:  # as if started under `ulimit -n`
        resource.setrlimit(resource.RLIMIT_NOFILE, tuple(spec["nofile"]))
    nofile = raise_open_file_limit(2 * spec["actors"])  # as the runtime's learner does
    context = zmq.Context(io_threads=io_threads_for(2 * spec["actors"]))
    keys = JobKeys.create(spec["key_folder"])
    if spec["relayed"]:
        keys.write_relay_folder()
    receiver = ExperienceReceiver(context, KINDS, keys=keys, credit_budget=spec["budget"])
    publisher = WeightPublisher(context, keys=keys)
    publisher.publish(0, {"weights": np.zeros(64, np.float32)})
    conn.send({"experience": receiver.address, "weights": publisher.address, "nofile": nofile})
    hellos: set[int] = set()
    last_hello = 0.0
    messages = steps = 0
    window: dict[str, Any] | None = None
    next_control = 0.0
    while True:
        publisher.serve_joins()
        message = receiver.receive(20)
        if message is not None and message.kind == EXPERIENCE:
            messages += 1
            steps += len(read_experience(message).batch)
        elif message is not None and message.kind == HELLO and message.meta["actor_index"] not in hellos:
            hellos.add(message.meta["actor_index"])
            last_hello = time.monotonic()
        now = time.monotonic()
        if now < next_control:
            continue
        next_control = now + CONTROL_EVERY_S
        if window is not None:
            window["in_flight"].append(receiver.ledger.in_flight)
            if now >= window["end"]:
                conn.send(_window_report(window, receiver, messages, steps))
                window = None
        if not conn.poll(0):
            continue
        command = conn.recv()
        if command[0] == "status":
            conn.send({"hellos": len(hellos), "last_hello": last_hello, "messages": messages})
        elif command[0] == "measure":
            window = {"start": now, "end": now + command[1], "messages": messages, "steps": steps, "in_flight": [],
                      "taken": receiver.taken, "bundles": receiver.bundles}
        elif command[0] == "stop":
            break
    receiver.close()
    publisher.close()
    stop_authenticator(context)
    context.term()


def _window_report(window: dict[str, Any], receiver: ExperienceReceiver, messages: int, steps: int) -> dict[str, Any]:
    """What the learner counted in the window; its process is read from outside (`LearnerProbe`)."""
    accounts = receiver.ledger.accounts
    in_flight = window["in_flight"] or [0]
    return {"wall": time.monotonic() - window["start"], "messages": messages - window["messages"],
            "taken": receiver.taken - window["taken"], "bundles": receiver.bundles - window["bundles"],
            "steps": steps - window["steps"], "in_flight_mean": float(np.mean(in_flight)),
            "in_flight_max": int(max(in_flight)), "budget": receiver.ledger.budget,
            "accounts": len(receiver.ledger.accounts), "connections": len({route[0] for route in accounts}),
            "outstanding_by_link": _outstanding_by_link(accounts),
            "uncredited": receiver.ledger.uncredited, "reclaimed": receiver.ledger.reclaimed,
            "malformed": receiver.malformed}


def _outstanding_by_link(accounts: Any) -> dict[str, int]:
    """Credits granted and not yet spent, per connection of the learner (relay ids by name)."""
    held: dict[str, int] = {}
    for route, account in accounts.items():
        if account.outstanding > 0:
            link = route[0].decode() if route[0].startswith(b"relay:") else "actors"
            held[link] = held.get(link, 0) + account.outstanding
    return held


class LearnerProbe:
    """The learner's process seen from this one, which has descriptors to spare when the learner
    has none: CPU seconds (its I/O, CURVE and ZAP threads included), RSS, peak RSS, descriptors and
    established TCP connections on its experience port."""

    def __init__(self, pid: int, port: int) -> None:
        self.process, self.pid, self.port = psutil.Process(pid), pid, port
        self.rss_max = 0

    def cpu(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system

    def sample_rss(self) -> int:
        rss = self.process.memory_info().rss
        self.rss_max = max(self.rss_max, rss)
        return rss

    def peak_rss(self) -> int:
        """VmHWM: the most the learner's process held at any time since it started."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return self.rss_max

    def descriptors(self) -> tuple[int, int]:
        established = sum(1 for c in self.process.net_connections("tcp") if c.laddr and c.laddr.port == self.port
                          and c.status == psutil.CONN_ESTABLISHED)
        return self.process.num_fds(), established


# ---------------------------------------------------------------- simulated actors (a few processes)
def actors_main(spec: dict[str, Any], conn: Any) -> None:
    from lamarckian_hpc.runtime.messages import hello_message

    _pin(spec["cpus"])
    count = len(spec["indices"])
    raise_open_file_limit(2 * count)  # a connection and a mailbox per socket
    context = zmq.Context(io_threads=io_threads_for(count))
    context.set(zmq.MAX_SOCKETS, count + 64)
    keys = JobKeys.load(spec["key_folder"])
    template: Message = spec["message"]
    interval = 1.0 / spec["rate"] if spec["rate"] > 0 else 0.0
    conn.send("ready")
    conn.recv()  # go
    senders, host, pid = [], socket.gethostname(), os.getpid()
    for index, (address, trust) in zip(spec["indices"], spec["routes"]):
        sender = ExperienceSender(context, address, keys, trust=trust, window=spec["window"])
        sender.send(hello_message(index, pid, host))
        sender.ask()
        senders.append(sender)
    messages = [replace(template, sender=f"actor-{i}", meta={**template.meta, "actor_index": i}) for i in spec["indices"]]
    # epoll on each socket's ZMQ_FD, so that a wake-up costs what is ready, not every socket: the
    # descriptor only says "look"; poll_credits drains the socket, and after every send (which may
    # take in a grant on the way) the socket is looked at again.
    epoll = select.epoll()
    slot = {}
    for k, sender in enumerate(senders):
        descriptor = sender.socket.getsockopt(zmq.FD)
        epoll.register(descriptor, select.EPOLLIN)
        slot[descriptor] = k
    first_credit: list[float | None] = [None] * count
    busy = [False] * count
    due: list[tuple[float, int]] = []  # (when the message being "sampled" is ready, which actor)
    state = {"credited": 0, "sent": 0, "refused": 0}

    def holds(k: int) -> None:
        if senders[k].credits <= 0 or busy[k]:
            return
        if first_credit[k] is None:
            first_credit[k] = time.monotonic()
            state["credited"] += 1
        busy[k] = True
        heapq.heappush(due, (time.monotonic() + interval, k))

    next_control = next_reask = 0.0
    while True:
        wait_ms = 20 if not due else max(0, min(20, math.ceil((due[0][0] - time.monotonic()) * 1000)))
        for descriptor, _ in epoll.poll(wait_ms / 1000):
            k = slot[descriptor]
            senders[k].poll_credits(0)
            holds(k)
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, k = heapq.heappop(due)
            sender = senders[k]
            message = replace(messages[k], meta={**messages[k].meta, "sequence": sender.spent})
            if not sender.send(message, timeout_ms=0, credited=True):
                state["refused"] += 1  # its queue is full: try again shortly, the credit still held
                heapq.heappush(due, (now + 0.005, k))
                continue
            state["sent"] += 1
            busy[k] = False
            sender.poll_credits(0)
            holds(k)
        if now >= next_reask:
            next_reask = now + REASK_EVERY_S
            for k, sender in enumerate(senders):
                if not busy[k] and sender.take_credit(0):
                    holds(k)
        if now < next_control:
            continue
        next_control = now + CONTROL_EVERY_S
        if conn.poll(0):
            if conn.recv() == "stop":
                break
            cpu = psutil.Process().cpu_times()
            conn.send({**state, "actors": count, "cpu": cpu.user + cpu.system,
                       "holding": sum(1 for sender in senders if sender.credits > 0),
                       "received": sum(sender.received for sender in senders),
                       "spent": sum(sender.spent for sender in senders),
                       "last_first_credit": max((t for t in first_credit if t is not None), default=0.0)})
    epoll.close()
    for sender in senders:
        sender.close()
    context.term()


# ---------------------------------------------------------------- one case (this process)
class Case:
    """The learner, relays and actor processes of one (mode, actors) point; `run()` measures it."""

    def __init__(self, mode: str, actors: int, args: argparse.Namespace, message: Message,
                 nofile: tuple[int, int] | None = None) -> None:
        from lamarckian_hpc.config import load_config
        from lamarckian_hpc.runtime.run_shape import credit_budget, credit_window

        config = load_config(CONFIG, [])
        self.mode, self.actors, self.args, self.message, self.nofile = mode, actors, args, message, nofile
        self.budget = args.budget or credit_budget(config, actors)
        self.window = credit_window(config, actors) if not args.budget else max(1, math.ceil(self.budget / actors))
        self.label = f"{mode}" + (f" (ulimit -n {nofile[0]}{' hard' if nofile[1] == nofile[0] else ''})"
                                  if nofile else "")
        self.spawn = multiprocessing.get_context("spawn")
        self.workdir = tempfile.mkdtemp(prefix="fanin-")
        self.processes: list[Any] = []  # the learner's and the actors', which end when told
        self.relay_processes: list[Any] = []  # relays run until killed
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        self.learner_cpus = cpus[:1] if len(cpus) > 1 and not args.no_pin else None
        self.other_cpus = cpus[1:] if self.learner_cpus else None

    def _start(self, target: Any, spec: dict[str, Any], name: str) -> Any:
        ours, theirs = self.spawn.Pipe()
        process = self.spawn.Process(target=target, args=(spec, theirs), daemon=True, name=name)
        process.start()
        self.processes.append(process)
        return ours

    def _relays(self, learner: dict[str, Any]) -> tuple[list[str], int, int]:
        """Start the relay processes layer by layer; the experience address of each actor's node."""
        nodes = min(self.args.max_relays, math.ceil(self.actors / self.args.actors_per_node))
        tree = build_tree(["learner", *(f"node{i}" for i in range(1, nodes + 1))])
        weights, experience = {tree.root: learner["weights"]}, {tree.root: learner["experience"]}
        ipc = {node: os.path.join(self.workdir, f"{i}e.ipc") for i, node in enumerate(tree.nodes)}
        for layer in (1, 2):
            for node in [n for n in tree.nodes[1:] if tree.layer_of(n) == layer]:
                spec = RelaySpec(node, tree.to_dict(), dict(weights), key_folder=str(Path(self.workdir, "keys", "relay")),
                                 experience_upstreams=dict(experience), experience_ipc_path=ipc[node],
                                 timeout_ms=self.args.relay_timeout_ms,
                                 bundle_wait_ms=0.0 if self.mode == "relayed-unbundled" else self.args.bundle_wait_ms)
                process, (weights[node], experience[node]) = spawn_relay_addresses(spec)
                if self.other_cpus:
                    os.sched_setaffinity(process.pid, self.other_cpus)
                self.relay_processes.append(process)
        first = sum(1 for n in tree.nodes[1:] if tree.layer_of(n) == 1)
        return [f"ipc://{ipc[tree.nodes[1 + i * nodes // self.actors]]}" for i in range(self.actors)], nodes, first

    def run(self) -> dict[str, Any]:
        try:
            return self._run()
        finally:
            self.close()

    def _run(self) -> dict[str, Any]:
        args, say = self.args, lambda text: print(f"  {self.label} {self.actors}: {text}", file=sys.stderr, flush=True)
        relayed = self.mode.startswith("relayed")
        learner = self._start(learner_main, {"cpus": self.learner_cpus, "nofile": self.nofile, "actors": self.actors,
                                             "key_folder": os.path.join(self.workdir, "keys"), "relayed": relayed,
                                             "budget": self.budget}, "learner")
        info = learner.recv() if learner.poll(120) else None
        if info is None:
            raise TimeoutError("the learner did not start")
        relays = layer_one = 0
        if relayed:
            addresses, relays, layer_one = self._relays(info)
            routes = [(address, BROADCAST) for address in addresses]
        else:
            routes = [(info["experience"], LEARNER)] * self.actors
        key_folder = os.path.join(self.workdir, "keys", "actor")
        blocks = np.array_split(np.arange(self.actors), min(args.processes, self.actors))
        hosts = [self._start(actors_main, {"cpus": self.other_cpus, "indices": block.tolist(), "key_folder": key_folder,
                                           "routes": [routes[i] for i in block], "window": self.window,
                                           "message": self.message, "rate": args.rate}, f"actors-{n}")
                 for n, block in enumerate(blocks)]
        for host in hosts:
            host.recv()
        say(f"{len(hosts)} actor processes, {relays} relays; connecting")
        go = time.monotonic()
        for host in hosts:
            host.send("go")
        probe = LearnerProbe(self.processes[0].pid, int(info["experience"].rsplit(":", 1)[1]))
        deadline, shown, last_change, seen = go + args.connect_timeout, 0.0, go, (-1, -1)
        while True:
            time.sleep(0.5)
            probe.sample_rss()
            status = _ask(learner, ("status",))
            actor_status = [_ask(host, "status") for host in hosts]
            credited = sum(s["credited"] for s in actor_status)
            now = time.monotonic()
            if (status["hellos"], credited) != seen:
                seen, last_change = (status["hellos"], credited), now
            # Up when every actor held a credit and heard; or when nothing changed for a while
            # (hellos lost on the way, or actors a descriptor limit keeps out).
            if seen == (self.actors, self.actors) or now > deadline or now - last_change > args.settle_seconds:
                break
            if now - shown > 5:
                shown = now
                say(f"{status['hellos']}/{self.actors} hellos, {credited}/{self.actors} hold a credit ({now - go:.0f} s)")
        credit_s = max(s["last_first_credit"] for s in actor_status) - go if credited == self.actors else None
        hello_s = status["last_hello"] - go if status["hellos"] == self.actors else None
        say(f"{status['hellos']} hellos, {credited} credited; measuring {args.seconds:g} s")
        before, cpu_before = [_ask(host, "status") for host in hosts], probe.cpu()
        learner.send(("measure", args.seconds))
        rss = [probe.sample_rss()]
        while not learner.poll(0.5):
            rss.append(probe.sample_rss())
            if time.monotonic() - go > args.connect_timeout + args.seconds + 60:
                raise TimeoutError("the learner did not report its window")
        window, learner_cpu = learner.recv(), probe.cpu() - cpu_before
        after = [_ask(host, "status") for host in hosts]
        fds, established = probe.descriptors()
        wall = window["wall"]
        row = {"mode": self.label, "actors": self.actors, "relays": relays, "learner_links_planned":
               layer_one if relayed else self.actors, "connections_held": window["connections"],
               "tcp_established": established, "nofile_soft": info["nofile"],
               "handshake_s": round(credit_s, 2) if credit_s is not None else None,
               "hellos_s": round(hello_s, 2) if hello_s is not None else None,
               "never_credited": self.actors - credited,
               "messages_per_s": round(window["messages"] / wall, 1), "env_steps_per_s": round(window["steps"] / wall),
               "learner_messages_per_s": round(window["taken"] / wall, 1),
               "rollouts_per_learner_message": round(window["messages"] / max(window["taken"], 1), 2),
               "learner_cpu": round(learner_cpu / wall, 3),
               "messages_per_learner_cpu_s": round(window["messages"] / max(learner_cpu, 1e-9), 1),
               "learner_cpu_us_per_env_frame": round(1e6 * learner_cpu / max(window["steps"], 1), 2),
               "credits_in_flight_mean": round(window["in_flight_mean"], 1),
               "credit_budget": window["budget"], "learner_fds": fds, "learner_rss_mib": round(max(rss) / 2**20, 1),
               "learner_peak_rss_mib": round(probe.peak_rss() / 2**20, 1),
               "actor_processes_cpu": round(sum(a["cpu"] - b["cpu"] for a, b in zip(after, before)) / wall, 2),
               "details": {"hellos_missing": self.actors - status["hellos"], "credit_window": self.window,
                           "credits_in_flight_max": window["in_flight_max"], "accounts": window["accounts"], "uncredited": window["uncredited"],
                           "reclaimed": window["reclaimed"], "malformed": window["malformed"], "window_s": round(wall, 2),
                           "sent_in_window": sum(a["sent"] - b["sent"] for a, b in zip(after, before)),
                           "refused_sends": sum(a["refused"] for a in after),
                           "outstanding_by_link": window["outstanding_by_link"],
                           "actors_holding_credits": sum(a["holding"] for a in after),
                           "credits_received_by_actors": sum(a["received"] for a in after),
                           "credits_spent_by_actors": sum(a["spent"] for a in after)}}
        say(f"{row['messages_per_s']:,.0f} msg/s, learner CPU {row['learner_cpu']:.0%}, "
            f"{row['connections_held']} connections, {fds} fds, {row['learner_rss_mib']} MiB, "
            f"{row['credits_in_flight_mean']} credits in flight")
        for host in hosts:
            host.send("stop")
        learner.send(("stop",))
        return row

    def close(self) -> None:
        for process in self.processes:
            process.join(timeout=10)
        for process in self.relay_processes:
            process.terminate()
        for process in self.processes + self.relay_processes:
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _ask(conn: Any, command: Any, timeout_s: float = 60.0) -> dict[str, Any]:
    conn.send(command)
    if not conn.poll(timeout_s):
        raise TimeoutError(f"no answer to {command!r}")
    return conn.recv()


# ---------------------------------------------------------------- the sweep
COLUMNS = [("mode", "{}"), ("actors", "{:,}"), ("relays", "{}"), ("learner_links_planned", "{:,}"),
           ("connections_held", "{:,}"),
           ("tcp_established", "{:,}"), ("nofile_soft", "{:,}"), ("handshake_s", "{}"), ("hellos_s", "{}"),
           ("never_credited", "{:,}"), ("messages_per_s", "{:,.0f}"), ("env_steps_per_s", "{:,.0f}"),
           ("learner_messages_per_s", "{:,.0f}"), ("rollouts_per_learner_message", "{}"),
           ("learner_cpu", "{:.0%}"), ("messages_per_learner_cpu_s", "{:,.0f}"), ("learner_cpu_us_per_env_frame", "{}"), ("credits_in_flight_mean", "{}"),
           ("credit_budget", "{}"), ("learner_fds", "{:,}"), ("learner_rss_mib", "{}"),
           ("learner_peak_rss_mib", "{}"), ("actor_processes_cpu", "{}")]


def print_table(rows: list[dict[str, Any]]) -> None:
    print("| " + " | ".join(name for name, _ in COLUMNS) + " |")
    print("|" + "|".join("---" if name == "mode" else "---:" for name, _ in COLUMNS) + "|")
    for row in rows:
        print("| " + " | ".join("n/a" if row[name] is None else form.format(row[name]) for name, form in COLUMNS) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[100, 1000, 6000])
    parser.add_argument("--modes", nargs="+", choices=["direct", "relayed", "relayed-unbundled"],
                        default=["direct", "relayed-unbundled", "relayed"])
    parser.add_argument("--bundle-wait-ms", type=float, default=RelaySpec.bundle_wait_ms,
                        help="relayed: how long a relay gathers experience into one message up (default: the runtime's)")
    parser.add_argument("--seconds", type=float, default=12.0, help="the measuring window of each case")
    parser.add_argument("--processes", type=int, default=4, help="processes the simulated actors share")
    parser.add_argument("--actors-per-node", type=int, default=40, help="actors behind one relay (cores a node)")
    parser.add_argument("--max-relays", type=int, default=12, help="relay processes at most (each is a process here)")
    parser.add_argument("--relay-timeout-ms", type=int, default=RelaySpec.timeout_ms,
                        help="a relay's heartbeat timeout towards its parent (default: the runtime's)")
    parser.add_argument("--rate", type=float, default=None,
                        help="messages/s of one simulated actor while it holds a credit (default: calibrated; 0: at once)")
    parser.add_argument("--message-steps", type=int, default=None, help="steps per message (default: the runtime's)")
    parser.add_argument("--budget", type=int, default=None, help="learner's credit budget (default: the runtime's)")
    parser.add_argument("--calibrate-seconds", type=float, default=5.0)
    parser.add_argument("--connect-timeout", type=float, default=120.0)
    parser.add_argument("--settle-seconds", type=float, default=15.0,
                        help="stop waiting for the handshake once nothing changed this long")
    parser.add_argument("--no-ulimit", action="store_true", help="leave out the `ulimit -n 1024` cases")
    parser.add_argument("--no-pin", action="store_true", help="do not give the learner a CPU of its own")
    parser.add_argument("--output", type=Path, default=RESULTS)
    common.add_common_args(parser)
    args = parser.parse_args(argv)

    print(f"calibrating one actor core ({args.calibrate_seconds:g} s)", file=sys.stderr, flush=True)
    calibration, message = calibrate(max(args.actors), args.calibrate_seconds, args.message_steps)
    if args.rate is None:
        args.rate = calibration["messages_per_cpu_second"]
    print(f"  {calibration['message_steps']} steps, {calibration['message_bytes']:,} bytes a message, "
          f"{calibration['messages_per_cpu_second']:,.0f} messages per CPU second", file=sys.stderr, flush=True)
    cases = [(mode, actors, None) for actors in args.actors for mode in args.modes]
    if not args.no_ulimit:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        cases += [("direct", max(args.actors), (1024, hard)), ("direct", max(args.actors), (1024, 1024))]
    rows, started = [], time.monotonic()
    for mode, actors, nofile in cases:
        print(f"{mode} {actors:,}{f' nofile {nofile}' if nofile else ''}", file=sys.stderr, flush=True)
        rows.append(Case(mode, actors, args, message, nofile).run())
    print_table(rows)
    result = {"zmq": zmq.zmq_version(), "seconds": args.seconds, "processes": args.processes,
              "actors_per_node": args.actors_per_node,
              "max_relays": args.max_relays, "rate": args.rate, "learner_pinned": not args.no_pin,
              "wall_seconds": round(time.monotonic() - started), "calibration": calibration, "results": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    common.write_results(args.output, result, args.label, indent=1)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
