"""Helpers the tests share (plain functions and classes; fixtures live in conftest.py files)."""
