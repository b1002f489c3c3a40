"""Whether a run fits in GPU memory: the per-rank plan from a model's shape, without torch."""
