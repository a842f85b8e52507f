"""Parsers from raw captured text (what a command printed) to evidence dataclasses.

The same parsers read a live machine's output and a bundle's stored copy of it.
"""
