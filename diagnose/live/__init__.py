"""A run on machines: config, run identity and discovery, hosts, collectors."""
