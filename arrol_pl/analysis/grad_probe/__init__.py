"""The gradient probe (beyond the paper): on identical rollouts, does choosing which of a group's rollouts to train
on improve the policy update? Each subset's GRPO gradient (all G, a random κG, the survival rules reading the learned
head or an oracle, a fresh κG) is compared with a reference gradient over many more rollouts, and the held-out
margin between right and wrong answers that one step of it moves is measured, paired by batch.

:mod:`.config` is the typed configuration, :mod:`.subsets` chooses the rollouts (the project's own decision code),
:mod:`.choice` chooses every subset once over all the batches' groups, :mod:`.gradients` takes the gradients and the
steps, :mod:`.measures` the pure measures and statistics, :mod:`.tables` renders them and :mod:`.run` is the whole
probe of ``arrol grad-probe`` (:func:`~.run.run_grad_probe`).
"""
