"""The learner side of a run: the processes that train a policy, and how several of them (ranks)
form one group whose updates are the update of one learner on all their steps; taking experience
in from the actors, the learners of a multi-policy run, checkpoints of the learner's state and
the watch over the actors that feed it.

The arithmetic of a data-parallel update is pure torch in `rl.data_parallel`; this package holds
what ties it to processes and hosts: `group` forms the `torch.distributed` group of a policy's
learner ranks and hands back its `GradientReducer`.
"""
