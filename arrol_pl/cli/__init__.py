"""The command line: ``arrol <command>`` (and ``python -m arrol_pl``), one command per job, each the same function
the checkout's script calls (``arrol train`` is ``experiments/run.py``); :mod:`arrol_pl.cli.hydra_app` is what every
Hydra command shares (where the presets are, the configuration checked before the job starts, one kind of error,
``--help``)."""
