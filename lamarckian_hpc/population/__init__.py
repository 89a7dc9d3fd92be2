"""The population workflow every population algorithm runs on (NSGA-II, the GA, ES, CMA-ES, game
balancing, game testing, EMOGI, PBT+PPO, the league), the asynchronous EvoRL loop of the Lamarckian
paper's Figure 1: `workflow` (programs, generations, checkpoints), `worker_pool` (the workers: in
this process, forked over `pipe_messages`, or Ray actors on any node), `command` (what the library
does around every population run), and the evolution of plain solutions as one of its programs
(`evolution`, `evolve_components`, `evolution_command`). The EvoRL programs are in `evorl`.

Nothing is imported here: `import lamarckian_hpc.population` loads no torch and no Ray.
"""
