"""What is known about a run: the model, facts, log-line shapes, reading files, sniffing kinds, bundles, parsers."""
