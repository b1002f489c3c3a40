"""Hydra's presets. A package, so that the wheel ships them as ``arrol_pl.conf`` (setup.py), which Hydra finds on
its package search path (``pkg://arrol_pl.conf``) only with this file."""
