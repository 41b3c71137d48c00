"""Subcommands of the ``veil`` CLI, one module each (see :mod:`companion.cli`)."""
