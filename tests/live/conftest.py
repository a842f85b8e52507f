from tests.live.identity_support import children  # noqa: F401  (the fixture)
