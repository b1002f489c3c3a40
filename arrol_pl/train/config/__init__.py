"""What a run is told: the typed run config, its loader and reference, checked before anything loads."""
