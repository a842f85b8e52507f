"""Collectors: one module per evidence source, each with its deadline (base.py: the contract)."""
