"""The test suite; ``tests/README.md`` says which tier lives where."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent  # the checkout: cwd and PYTHONPATH of our programs
