"""copilot-opt: offline preparation of what a self-hosted code assistant sends to its model."""

__version__ = "0.1.0"

__all__ = ["__version__"]
