"""lccn-subscriber: Tacker LCM events in, working Kubernetes clusters out."""

__all__ = ["__version__"]

__version__ = "0.1.0"
