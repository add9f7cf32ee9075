"""The test suite's plugins: the helper modules of ``tests/support`` that define fixtures."""
pytest_plugins = ["support.data", "support.s3"]
