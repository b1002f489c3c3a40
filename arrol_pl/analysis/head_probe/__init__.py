"""Offline probe of the quality head against DeepConf trace confidence (paper §4.2, Fig. 2(b–d)).

One fixed set of rollouts, generated once without pruning, is scored at several detection lengths L:
a fresh :class:`~arrol_pl.core.quality_head.QualityHead` learns correctness from the detect-time features of some
problems and is tested on the others, next to DeepConf confidence over the same first L tokens of the same
rollouts. :mod:`.features` reads the features the engine prunes on, :mod:`.fit` fits and scores a head,
:mod:`.lengths` runs the probe at each L, :mod:`.replay` replays the pruning rules and the votes on the test
groups, :mod:`.tables` renders the tables and :mod:`.run` is the whole probe of ``experiments/head_quality.py``
(:func:`~.run.run_probe`).
"""
