"""Test helpers: builders of small tables and run folders, a local Ray cluster, the CLI as a subprocess, the
real-data fixtures. Modules that define fixtures are plugins (``tests/conftest.py: pytest_plugins``); every
module is also imported directly as ``support.<name>``."""
