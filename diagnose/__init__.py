"""diagnose: post-mortem diagnosis of crashed ML training runs."""

__version__ = "0.1.0"
