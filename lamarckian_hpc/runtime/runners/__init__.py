"""The runs that tie the sides together: `training_run.run_training` chooses the serial trainer
(sampling and learning in one process, `trainer`, `multiagent_trainer`) or the distributed one
(`distributed`: the learner process driving Ray actors), and records what happens to the run
file."""
