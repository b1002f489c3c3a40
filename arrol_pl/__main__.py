"""``python -m arrol_pl <command> [arguments]``: the ``arrol`` command (:mod:`arrol_pl.cli.main`)."""

import sys

from arrol_pl.cli.main import main

sys.exit(main(prog="python -m arrol_pl"))
