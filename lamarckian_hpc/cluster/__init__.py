"""Running on Slurm: the job's environment (`slurm_env`), bootstrap discovery over MPI
(`discovery`), job states without accounting (`scheduler`), the per-job Ray cluster
(`ray_cluster`), the submitted job (`job`) and the submitit launcher (`launcher`, `command`).

Nothing is imported here: these modules need the optional `slurm` extra (python-hostlist,
mpi4py, submitit), and `lamarckian-hpc` must start without it.
"""
