"""bandwise: plan, run and debug large-model training."""

__version__ = "0.1.0"
