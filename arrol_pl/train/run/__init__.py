"""A run's life: prelaunch checks, building its parts, the trainer and its callbacks, evaluation, the end."""
