"""Reporters: one module per output format (render.py holds the Format table), and secret masking."""
