"""Per-job CURVE keys, handed out by role: only the processes of one job can read its weights or
send it samples, and no process holds a secret its role does not need.

Cluster nodes are shared: any user on a node can connect to any TCP port on it, loopback included.
So every socket of a run is encrypted and authenticated with ZeroMQ's CURVE, with keys made when
the job starts. A CURVE client names the one server public key it trusts, so whoever holds a
server's secret can stand in for that server. Hence three kinds of key pair:

- `learner`: the learner's experience receiver serves with it. Its secret is made in the learner's
  process and never written anywhere: no other process, on any host, can impersonate the learner.
- `broadcast`: every weights publisher serves with it, the learner's and each relay's. Relays run
  on the actors' nodes, so its secret is written to the relay folder, and only in a run that has
  relays.
- `client`: every connecting socket (actors; relays towards their parent) presents it. The ZAP
  authenticator of every process that binds admits exactly the public keys in its `admitted`
  folder: the client's.

The key folder (mode 0700, every file 0600, written private from the start) is laid out by role,
and each process is given only its role's folder:

    <key folder>/admitted/client.key          the learner's ZAP handler admits these
    <key folder>/actor/   client.key_secret, learner.key, broadcast.key (public only)
    <key folder>/relay/   client.key_secret, broadcast.key_secret, learner.key (public only),
                          admitted/client.key

Processes read their keys from their folder (never from a message or a task argument), so the
secrets cross no network and no Ray object store.
"""

from __future__ import annotations

import datetime
import os
import shutil
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

LEARNER, BROADCAST, CLIENT = "learner", "broadcast", "client"
SERVER_ROLES = (LEARNER, BROADCAST)
ACTOR_FOLDER, RELAY_FOLDER, ADMITTED_FOLDER = "actor", "relay", "admitted"


class KeyFolderError(ValueError):
    """Keys that are missing, unreadable or not private enough to trust."""


@dataclass(frozen=True)
class KeyPair:
    public: bytes
    secret: bytes = field(repr=False)

    @classmethod
    def generate(cls) -> KeyPair:
        return cls(*zmq.curve_keypair())


@dataclass(frozen=True)
class JobKeys:
    """The keys one process of a job holds: the client pair it connects with, the public key of
    each server role it may connect to, and the pairs of the roles it serves as (none for an actor)."""

    folder: Path
    client: KeyPair
    trusted: Mapping[str, bytes]
    serving: Mapping[str, KeyPair] = field(default_factory=dict)
    #: Where the ZAP handler of a serving process finds the public keys it admits.
    admitted: Path | None = None

    @classmethod
    def create(cls, folder: str | Path, relays: bool = False) -> JobKeys:
        """Make a new job's keys in `folder` (created private if absent) and return the learner's:
        all pairs, the learner's secret in memory only. `relays`: also write the relay folder."""
        root = _private_folder(Path(folder))
        client, learner, broadcast = KeyPair.generate(), KeyPair.generate(), KeyPair.generate()
        _write_key(_private_folder(root / ADMITTED_FOLDER) / f"{CLIENT}.key", client.public)
        actor = _private_folder(root / ACTOR_FOLDER)
        _write_key(actor / f"{CLIENT}.key_secret", client.public, client.secret)
        _write_key(actor / f"{LEARNER}.key", learner.public)
        _write_key(actor / f"{BROADCAST}.key", broadcast.public)
        shutil.rmtree(root / RELAY_FOLDER, ignore_errors=True)  # an earlier start's: no longer trusted
        keys = cls(root, client, {LEARNER: learner.public, BROADCAST: broadcast.public},
                   {LEARNER: learner, BROADCAST: broadcast}, root / ADMITTED_FOLDER)
        if relays:
            keys.write_relay_folder()
        return keys

    def write_relay_folder(self) -> Path:
        """Write the relay folder (the client pair and the broadcast pair) of keys made by `create`:
        only once a run knows it has relays (`runtime.broadcast: auto` learns it when its nodes are
        known), so that no broadcast secret is on disk in a run without them."""
        broadcast = self.serving.get(BROADCAST)
        if broadcast is None:
            raise KeyFolderError(f"the keys in {self.folder} cannot make a relay folder (no broadcast pair)")
        relay = _private_folder(self.folder / RELAY_FOLDER)
        _write_key(relay / f"{CLIENT}.key_secret", self.client.public, self.client.secret)
        _write_key(relay / f"{BROADCAST}.key_secret", broadcast.public, broadcast.secret)
        _write_key(relay / f"{LEARNER}.key", self.trusted[LEARNER])  # experience goes up to the learner
        _write_key(_private_folder(relay / ADMITTED_FOLDER) / f"{CLIENT}.key", self.client.public)
        return relay

    @classmethod
    def load(cls, folder: str | Path) -> JobKeys:
        """Read the keys of a role's folder (`actor_folder` or `relay_folder` of the job's keys);
        refuse a folder that other users could read."""
        folder = Path(folder)
        if not folder.is_dir():
            raise KeyFolderError(f"no key folder at {folder}")
        _check_private(folder)
        if not (folder / f"{CLIENT}.key_secret").exists() and (folder / ACTOR_FOLDER).is_dir():
            raise KeyFolderError(f"{folder} is a job's key folder; a process is given its role's folder in it "
                                 f"({ACTOR_FOLDER}/ or {RELAY_FOLDER}/)")
        client = _read_pair(folder / f"{CLIENT}.key_secret")
        trusted: dict[str, bytes] = {}
        serving: dict[str, KeyPair] = {}
        for role in SERVER_ROLES:
            if (folder / f"{role}.key_secret").exists():
                serving[role] = _read_pair(folder / f"{role}.key_secret")
                trusted[role] = serving[role].public
            elif (folder / f"{role}.key").exists():
                trusted[role] = _read_public(folder / f"{role}.key")
        admitted = folder / ADMITTED_FOLDER
        return cls(folder, client, trusted, serving, admitted if serving else None)

    @property
    def actor_folder(self) -> Path:
        """The folder an actor is given: the client pair and the servers' public keys."""
        return self._role_folder(ACTOR_FOLDER)

    @property
    def relay_folder(self) -> Path:
        """The folder a relay is given: the client pair and the broadcast pair."""
        return self._role_folder(RELAY_FOLDER)

    def _role_folder(self, name: str) -> Path:
        path = self.folder / name
        if not path.is_dir():
            raise KeyFolderError(f"no {name} keys in {self.folder} (only the keys `JobKeys.create` made have them"
                                 + (", with relays=True" if name == RELAY_FOLDER else "") + ")")
        return path

    def serve(self, socket: zmq.Socket, role: str) -> None:
        """Make a binding socket a CURVE server of `role` (call before bind)."""
        pair = self.serving.get(role)
        if pair is None:
            raise KeyFolderError(f"the keys in {self.folder} cannot serve as {role}")
        socket.curve_secretkey = pair.secret
        socket.curve_publickey = pair.public
        socket.curve_server = True

    def connect(self, socket: zmq.Socket, role: str) -> None:
        """Make a connecting socket a CURVE client that trusts only the server of `role` (call before connect)."""
        server = self.trusted.get(role)
        if server is None:
            raise KeyFolderError(f"the keys in {self.folder} do not name a {role} server to trust")
        socket.curve_secretkey = self.client.secret
        socket.curve_publickey = self.client.public
        socket.curve_serverkey = server


def _private_folder(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _check_private(folder: Path) -> None:
    mode = stat.S_IMODE(folder.stat().st_mode)
    if mode & 0o077:
        raise KeyFolderError(f"key folder {folder} has mode {mode:o}; it must be private to its owner (700)")


def _write_key(path: Path, public: bytes, secret: bytes | None = None) -> None:
    """A key file in ZeroMQ's certificate format, created 0600 (never readable by others, not even
    for a moment); an existing file is replaced."""
    if path.exists():
        path.unlink()
    kind = "**Secret**" if secret is not None else "Public"
    lines = [f"#   ****  Generated on {datetime.datetime.now()} by lamarckian-hpc  ****",
             f"#   ZeroMQ CURVE {kind} Certificate", "", "metadata", "curve",
             f'    public-key = "{public.decode()}"']
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode()}"')
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write("\n".join(lines) + "\n")


def _read_pair(path: Path) -> KeyPair:
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as error:
        raise KeyFolderError(f"cannot read {path}: {error}") from None
    if secret is None:
        raise KeyFolderError(f"{path} holds no secret key")
    return KeyPair(public, secret)


def _read_public(path: Path) -> bytes:
    try:
        return zmq.auth.load_certificate(path)[0]
    except (OSError, ValueError) as error:
        raise KeyFolderError(f"cannot read {path}: {error}") from None


_authenticators: dict[int, ThreadAuthenticator] = {}
_lock = threading.Lock()


def authenticate(context: zmq.Context, keys: JobKeys) -> None:
    """Start (once per context) the ZAP handler that admits only peers holding the job's client keys."""
    if keys.admitted is None or not keys.admitted.is_dir():
        raise KeyFolderError(f"the keys in {keys.folder} name no admitted clients; they cannot serve")
    with _lock:
        if id(context) in _authenticators:
            return
        authenticator = ThreadAuthenticator(context)
        authenticator.start()
        # Admits the public keys of the *.key files in the folder: the job's client key.
        authenticator.configure_curve(domain="*", location=str(keys.admitted))
        _authenticators[id(context)] = authenticator


def stop_authenticator(context: zmq.Context) -> None:
    """Stop the context's ZAP handler; its socket would otherwise keep `context.term()` waiting."""
    with _lock:
        authenticator = _authenticators.pop(id(context), None)
    if authenticator is not None:
        authenticator.stop()
