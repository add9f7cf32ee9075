"""The test suite's plugins: the helper modules of ``tests/support`` that define fixtures."""
import generator  # first: pins numpy's kernels before anything imports numpy (generator.numerics)
import os

import pytest

pytest_plugins = ["support.data", "support.s3"]


def pytest_configure(config):
    # A numpy RuntimeWarning raised in drivegen's own code (an overflow, a NaN cast to an integer) is a bug the
    # suite must show, not a line in its warnings summary.
    for pkg in ("generator", "actors", "schemas"):
        config.addinivalue_line("filterwarnings", f"error::RuntimeWarning:{pkg}")


@pytest.fixture(autouse=True)
def _ray_auth_mode_as_it_was():
    """A command that joins a cluster sets ``RAY_AUTH_MODE`` in its own process, for Ray to read there
    (``generator.pipeline.ray_connect``); a command is one process, but the suite runs many in one: each test
    starts with the variable as the one before found it (a joined no-auth cluster made every later embedded run
    refuse ``RAY_AUTH_MODE=disabled``)."""
    before = os.environ.get("RAY_AUTH_MODE")
    yield
    if os.environ.get("RAY_AUTH_MODE") != before:
        if before is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = before
