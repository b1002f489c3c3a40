"""Training layer: the Lightning module, its data, callbacks and the per-phase helpers it calls.

Each phase of a training step is a function in :mod:`.phases` or :mod:`.logprobs` that can be
tested alone; :class:`~arrol_pl.train.module.ArrolModule` only orchestrates them.
"""
