"""The ``lccn-subscriber`` command line: :func:`main` (the console script) and its groups."""

from subscriber.cli.root import main

__all__ = ["main"]
