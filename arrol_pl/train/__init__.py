"""Training: Algorithm 1 on Lightning, in sub-packages by job, each importing only from those before it.

- :mod:`.config`: what a run is told, checked before anything loads;
- :mod:`.memory`: whether a run fits in GPU memory, planned without torch;
- :mod:`.policy`: the policy on one or many ranks: log-probs, sharding, weights for the engine, the update's peak;
- :mod:`.records`: what a run writes and reads back: its directory, checkpoints, summary, loggers;
- :mod:`.step`: one step of Algorithm 1: the Lightning module and a function per phase;
- :mod:`.run`: a run's life: prelaunch checks, building the parts, the trainer, evaluation, the run's end.

:class:`~arrol_pl.train.step.module.ArrolModule` only orchestrates; each phase can be tested alone.
"""
