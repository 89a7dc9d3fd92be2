"""The policies a population run keeps in its saved state (`<run>.ckpt`), as
`trained.policy.TrainedPolicy`s for `lamarckian-hpc evaluate`:

- a PBT member (`--member ID`), by the id the run prints and records in `/population`; the saved
  state holds the population after the last interval, so an id that PBT replaced since (an
  exploited member's) is no longer there;
- a league learner (`--learner NAME`: main_0, main_exploiter_0, ...), as the league's last saved
  generation left it, playing one side of vector Pong against the scripted player
  (`lamarckian/Pong-v0` with the league's `algorithm.scripted_opponent_skill`), the opponent the
  league's own `main_score_vs_scripted` is measured against, or in the league's game against
  another of its learners (`--opponent NAME`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..config import PBTConfig, RunConfig, apply_overrides
from ..config.league_run import LeagueRunConfig
from ..config.train import EnvConfig
from ..runtime.actor.multiagent_sampling import make_parallel_env
from ..runtime.learner.checkpoint import checkpoint_path, load_run_state
from ..trained.evaluation import AgainstPolicy
from ..trained.policy import TrainedPolicy, TrainedPolicyError, policy_from_weights, stored_config
from .league_ppo import CHECKPOINT_KIND as LEAGUE_KIND
from .league_ppo import learner_names
from .member import MODEL_PREFIX, member_run_config
from .pbt_ppo import CHECKPOINT_KIND

#: The two-player game whose scripted player a league learner is evaluated against, and that player's env.
PONG_TWO_PLAYER, SCRIPTED_PONG = "pettingzoo:lamarckian_hpc.envs.pong_two_player", "lamarckian/Pong-v0"


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


def load_league_learner(run_path: str | Path, name: str, opponent: str | None = None
                        ) -> tuple[TrainedPolicy, str, Callable[[], AgainstPolicy] | None]:
    """League learner `name` of the league run at `run_path` as its last saved generation left it,
    set to play vector Pong against the scripted player (`opponent` None), or in the league's own
    game from its learner seat against learner `opponent` (greedy, from the other seat); with a
    line naming the opponent, and the maker of that game (None: the scripted player's env).
    TrainedPolicyError (one line) for another run, another game, no saved state or an unknown name."""
    run_path = Path(run_path)
    tree = stored_config(run_path)
    kind = tree.get("algorithm", {}).get("name")
    if kind != LEAGUE_KIND:
        raise TrainedPolicyError(f"--learner names a learner of a league run; {run_path} is a {kind or 'unknown'} run")
    try:
        config = apply_overrides(tree, [], str(run_path), LeagueRunConfig)
        state = load_run_state(checkpoint_path(run_path), LEAGUE_KIND)
    except ValueError as error:
        raise TrainedPolicyError(str(error).removeprefix("error: ").splitlines()[0]) from None
    if config.env.id != PONG_TWO_PLAYER:
        raise TrainedPolicyError(f"a league learner is evaluated against the scripted Pong player; {run_path} "
                                 f"plays {config.env.id}")
    names = learner_names(config)
    for asked in (name, opponent) if opponent is not None else (name,):
        if asked not in names:
            raise TrainedPolicyError(f"{run_path} has no learner {asked!r} (learners: {', '.join(names)})")
    skill = config.algorithm.scripted_opponent_skill
    scripted = RunConfig(seed=config.seed, env=EnvConfig(id=SCRIPTED_PONG, kwargs={"opponent_skill": skill}),
                         model=config.model, algorithm=config.ppo)

    def learner(learner_name: str) -> TrainedPolicy:
        weights = state["members"][names.index(learner_name)]["weights"]
        return policy_from_weights(scripted, weights, int(state["generation"]), checkpoint_path(run_path))

    if opponent is None:
        return learner(name), f"the scripted Pong player (skill {skill:g})", None
    other = learner(opponent)
    return (learner(name), f"learner {opponent} (greedy)",
            lambda: AgainstPolicy(make_parallel_env(config.env), config.algorithm.seats, other, config.env.id))
