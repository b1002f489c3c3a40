"""One step of Algorithm 1: the Lightning module that orchestrates it and a function per phase."""
