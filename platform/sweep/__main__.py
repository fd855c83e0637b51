"""``python -m platform.sweep``: see :mod:`platform.sweep.command`."""
from platform.cli import run_command
from platform.sweep.command import main

run_command(main)
