"""diagnose: post-mortem diagnosis of crashed ML training runs (on PyPI as diagnose-ml)."""

# The one place the version is written: pyproject.toml reads it (dynamic version), `diagnose
# --version`, the JSON report's tool.version and SARIF's tool.driver.version show it.
__version__ = "0.1.0"
DISTRIBUTION = "diagnose-ml"  # `pip install diagnose-ml`; "diagnose" on PyPI is another project
HOMEPAGE = "https://github.com/diagnose-ml/diagnose"
