"""The security tests reuse the tacker tier's simulated OpenStack (a real instantiation
needs one) and its Tacker bed (the root conftest's, one per run)."""

from tests.tacker.conftest import sim

__all__ = ["sim"]
