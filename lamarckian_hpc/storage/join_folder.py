"""The folder beside a run file through which actor jobs find a running run and leave it.

A run is a learner job and any number of actor jobs, which Slurm may start in another partition,
before the learner or long after it. They share nothing but the file system, so the learner job
writes where its cluster is (the Ray head's address and the cluster's token) into a private file
here, and an actor job reads it, joins, and announces its leaving here before it goes. The folder
and its files are readable by their owner alone: the token admits a process into the run's cluster.

    <run>.join/
        contact.json      the head's address, the cluster's token, the learner job and its start
        finished          the run ended: actor jobs waiting for a (requeued) learner stop waiting
        leaving/<label>   an actor job's node is about to go (time limit, scancel, preemption)
        left/<label>      the learner stopped that node's actors and took their credits back

A joined node's label is its Slurm node name and its job (`node7-job1234`), so a node that a later
actor job brings back is a new member, never taken for the one that left.

A requeued learner job writes a new contact (a new head, a new token, another `generation`);
actor jobs whose head went away wait for it and join again.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .private_files import create_private_file, fsync_file, make_private_folder

CONTACT_FILE = "contact.json"
FINISHED_FILE = "finished"
LEAVING_FOLDER = "leaving"
LEFT_FOLDER = "left"
#: The Ray resource every node of an actor job offers (one unit), so the learner tells joined nodes
#: from its own job's.
JOINED_NODE_RESOURCE = "lamarckian_joined_node"
_NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class JoinFolderError(RuntimeError):
    """The join folder is missing, unreadable or not private; the message names it."""


def join_folder_of(run_path: str | Path) -> Path:
    """The join folder of a run file: `<run>.join` beside it."""
    return Path(run_path).with_suffix(".join")


@dataclass(frozen=True)
class RunContact:
    """What an actor job needs to join the run's cluster."""

    head_address: str       # ip:port of the Ray head's GCS
    ray_token: str          # the cluster's auth token (RAY_AUTH_TOKEN)
    generation: str         # changes with every start of the learner job (a requeue)
    learner_job_id: str
    run_path: str
    written_at: float

    @property
    def head_host(self) -> str:
        return self.head_address.rsplit(":", 1)[0]

    @property
    def head_port(self) -> int:
        return int(self.head_address.rsplit(":", 1)[1])


def _write_private(path: Path, text: str) -> None:
    """`text` at `path`, private from the moment it exists, whole or not at all (renamed into place)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = create_private_file(temporary)
    with os.fdopen(descriptor, "w") as stream:
        stream.write(text)
    fsync_file(temporary)
    os.replace(temporary, path)


def _check_node(node: str) -> str:
    if not _NODE_NAME.match(node):
        raise JoinFolderError(f"not a node name: {node!r}")
    return node


class JoinFolder:
    """One run's join folder; the learner job writes the contact and `left`, actor jobs `leaving`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def create(self) -> None:
        make_private_folder(self.path)
        for name in (LEAVING_FOLDER, LEFT_FOLDER):
            make_private_folder(self.path / name)

    # ---- the learner job ----
    def publish(self, contact: RunContact) -> None:
        """Open the run to actor jobs: a new contact, and no leftover of an earlier start."""
        self.create()
        (self.path / FINISHED_FILE).unlink(missing_ok=True)
        for name in (LEAVING_FOLDER, LEFT_FOLDER):
            for marker in (self.path / name).iterdir():
                marker.unlink(missing_ok=True)
        _write_private(self.path / CONTACT_FILE, json.dumps(asdict(contact)))

    def finish(self) -> None:
        """The run ended: actor jobs stop waiting for it; the token is removed from the disk."""
        (self.path / CONTACT_FILE).unlink(missing_ok=True)
        _write_private(self.path / FINISHED_FILE, f"{time.time()}\n")

    def leaving(self) -> list[str]:
        """Nodes that announced their leaving and have not been let go yet."""
        folder = self.path / LEAVING_FOLDER
        if not folder.is_dir():
            return []
        left = set(self.left())
        return sorted(name for name in os.listdir(folder) if _NODE_NAME.match(name) and name not in left)

    def left(self) -> list[str]:
        folder = self.path / LEFT_FOLDER
        return sorted(os.listdir(folder)) if folder.is_dir() else []

    def mark_left(self, node: str) -> None:
        _write_private(self.path / LEFT_FOLDER / _check_node(node), f"{time.time()}\n")

    # ---- an actor job ----
    def contact(self) -> RunContact | None:
        """The current contact, or None while there is none (the learner job is queued or requeued)."""
        path = self.path / CONTACT_FILE
        try:
            mode = path.stat().st_mode
            text = path.read_text()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise JoinFolderError(f"cannot read {path}: {error}") from None
        if mode & 0o077:
            raise JoinFolderError(f"{path} is readable by others (mode {oct(mode & 0o777)}): it holds the "
                                  "cluster's token; refusing it")
        try:
            return RunContact(**json.loads(text))
        except (ValueError, TypeError) as error:
            raise JoinFolderError(f"{path} is not a run's contact: {error}") from None

    def finished(self) -> bool:
        return (self.path / FINISHED_FILE).exists()

    def announce_leaving(self, node: str) -> None:
        (self.path / LEFT_FOLDER / _check_node(node)).unlink(missing_ok=True)
        _write_private(self.path / LEAVING_FOLDER / node, f"{time.time()}\n")

    def was_let_go(self, node: str) -> bool:
        return (self.path / LEFT_FOLDER / _check_node(node)).exists()
