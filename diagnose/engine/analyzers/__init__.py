"""Analyzers: reasoning a regex cannot do, attached to a rule with `analyze: <name>` (registry.py)."""
