"""The ARRoL algorithm core: pure functions and small modules on tensors.

Imports torch and numpy only (no vllm, no lightning), so the engine, the trainer, the evaluator
and the tests all call the same code. Submodules:

- :mod:`.quality_head`  — ``QualityHead`` (paper §4.2)
- :mod:`.head_training` — its replay window, BCE update and quality metrics (§4.2–4.3)
- :mod:`.calibration`   — ``BinnedCalibrator`` (§4.2, App. A.4 Eq. 1)
- :mod:`.survival`      — ``survival_probabilities`` and the δ solve (App. A.4 Eq. 2)
- :mod:`.pruning`       — ``PrunerParams`` (h_t in Algorithm 1) and the policies ``arrol``/``random``/``none``
- :mod:`.decisions`     — the keep/prune decisions from h_t (``decide_group``, ``decide_batch``)
- :mod:`.advantages`    — GRPO / Dr.GRPO advantages, DAPO's dynamic-sampling filter
- :mod:`.losses`        — PPO-clip, loss aggregation modes, KL estimators
- :mod:`.reward_shaping` — DAPO's soft overlong penalty
- :mod:`.confidence`    — DeepConf trace confidence (§3)
- :mod:`.voting`        — majority / confidence-weighted / ARRoL rank-weighted votes (§4.4)
- :mod:`.metrics`       — avg@k, pass@k, maj@k, balance statistics (Table 4), AUC, Spearman, ECE
- :mod:`.survivor_auc`  — the AUC over every rollout before pruning, estimated from the survivors
"""
