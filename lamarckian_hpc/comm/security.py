"""Per-job CURVE keys: only the processes of one job can read its weights or send it samples.

Cluster nodes are shared: any user on a node can connect to any TCP port on it, loopback included.
So every socket of a run is encrypted and authenticated with ZeroMQ's CURVE, with keys made when
the job starts and kept in the job's key folder (mode 0700, secret files 0600):

- `server` keys belong to the sockets that bind (the learner's publisher and receiver, relays);
- `client` keys belong to the sockets that connect (actors, relays towards their parent).

A ZAP authenticator in every process that binds accepts a connection only when the peer proves it
holds one of the job's secret keys; anyone else's handshake fails and none of their messages are
ever delivered. Every process reads the keys from the folder (never from a message or a task
argument), so the secrets cross no network and no Ray object store.
"""

from __future__ import annotations

import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

SERVER, CLIENT = "server", "client"


class KeyFolderError(ValueError):
    """Keys that are missing, unreadable or not private enough to trust."""


@dataclass(frozen=True)
class JobKeys:
    folder: Path
    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes

    @classmethod
    def create(cls, folder: str | Path) -> JobKeys:
        """Make a new job's keys in `folder` (created private if absent) and load them."""
        folder = Path(folder)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        for name in (SERVER, CLIENT):
            public, secret = zmq.auth.create_certificates(folder, name)
            os.chmod(public, 0o600)
            os.chmod(secret, 0o600)
        return cls.load(folder)

    @classmethod
    def load(cls, folder: str | Path) -> JobKeys:
        """Read a job's keys; refuse a folder that other users could read."""
        folder = Path(folder)
        if not folder.is_dir():
            raise KeyFolderError(f"no key folder at {folder}")
        mode = stat.S_IMODE(folder.stat().st_mode)
        if mode & 0o077:
            raise KeyFolderError(f"key folder {folder} has mode {mode:o}; it must be private to its owner (700)")
        keys: dict[str, tuple[bytes, bytes]] = {}
        for name in (SERVER, CLIENT):
            path = folder / f"{name}.key_secret"
            try:
                public, secret = zmq.auth.load_certificate(path)
            except (OSError, ValueError) as error:
                raise KeyFolderError(f"cannot read {path}: {error}") from None
            if secret is None:
                raise KeyFolderError(f"{path} holds no secret key")
            keys[name] = (public, secret)
        return cls(folder, *keys[SERVER], *keys[CLIENT])

    def serve(self, socket: zmq.Socket) -> None:
        """Make a binding socket a CURVE server (call before bind)."""
        socket.curve_secretkey = self.server_secret
        socket.curve_publickey = self.server_public
        socket.curve_server = True

    def connect(self, socket: zmq.Socket) -> None:
        """Make a connecting socket a CURVE client of this job (call before connect)."""
        socket.curve_secretkey = self.client_secret
        socket.curve_publickey = self.client_public
        socket.curve_serverkey = self.server_public


_authenticators: dict[int, ThreadAuthenticator] = {}
_lock = threading.Lock()


def authenticate(context: zmq.Context, keys: JobKeys) -> None:
    """Start (once per context) the ZAP handler that admits only peers holding the job's keys."""
    with _lock:
        if id(context) in _authenticators:
            return
        authenticator = ThreadAuthenticator(context)
        authenticator.start()
        # Admits the public keys of the *.key files in the folder: the job's server and client keys.
        authenticator.configure_curve(domain="*", location=str(keys.folder))
        _authenticators[id(context)] = authenticator


def stop_authenticator(context: zmq.Context) -> None:
    """Stop the context's ZAP handler; its socket would otherwise keep `context.term()` waiting."""
    with _lock:
        authenticator = _authenticators.pop(id(context), None)
    if authenticator is not None:
        authenticator.stop()
