"""campaign: frozen-contract experiment windows for LLM inference serving."""

__version__ = "0.3.0"
__all__ = ["__version__"]
