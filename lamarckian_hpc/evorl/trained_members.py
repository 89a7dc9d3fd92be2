"""A PBT member's policy, from the state its run saved (`<run>.ckpt`, after its last interval): the
member's network as a `runtime.trained_policy.TrainedPolicy`, for `lamarckian-hpc evaluate --member`.

Members are named by the ids the run prints and records in `/population` (`id`); the saved state
holds the members in the population after the last interval, so an id that PBT replaced since (an
exploited member's) is no longer there.
"""

from __future__ import annotations

from pathlib import Path

from ..config import PBTConfig, apply_overrides
from ..runtime.checkpoint import checkpoint_path, load_run_state
from ..runtime.trained_policy import TrainedPolicy, TrainedPolicyError, policy_from_weights, stored_config
from .member import MODEL_PREFIX, member_run_config
from .pbt_ppo import CHECKPOINT_KIND


def load_pbt_member(run_path: str | Path, member_id: int) -> TrainedPolicy:
    """The policy of member `member_id` of the PBT run at `run_path`, as its last saved interval left
    it; TrainedPolicyError (one line) for another kind of run, no saved state or an unknown id."""
    run_path = Path(run_path)
    tree = stored_config(run_path)
    name = tree.get("algorithm", {}).get("name")
    if name != CHECKPOINT_KIND:
        raise TrainedPolicyError(f"--member names a member of a PBT run; {run_path} is a {name or 'unknown'} run "
                                 "(without --member: a training run's policy)")
    try:
        config = apply_overrides(tree, [], str(run_path), PBTConfig)
        state = load_run_state(checkpoint_path(run_path), CHECKPOINT_KIND)
    except ValueError as error:
        raise TrainedPolicyError(str(error).removeprefix("error: ").splitlines()[0]) from None
    ids = [int(value) for value in state["program"]["pbt"]["ids"]]
    if member_id not in ids:
        raise TrainedPolicyError(f"member {member_id} is not in the population {run_path} saved "
                                 f"(members {', '.join(map(str, ids))})")
    slot = ids.index(member_id)
    member = state["members"][slot]
    weights = {key[len(MODEL_PREFIX):]: array for key, array in member["arrays"].items() if key.startswith(MODEL_PREFIX)}
    return policy_from_weights(member_run_config(config, slot), weights, int(member["version"]),
                               checkpoint_path(run_path))
