"""What we know about regexes: the sre shim, hang checks, the byte-level prefilter."""
