"""Evidence x rules -> ranked causes: the scanner, three-valued evaluation, findings, ranking, tracebacks, analyzers."""
