"""The test suite's plugins: the helper modules of ``tests/support`` that define fixtures."""
import generator  # first: pins numpy's kernels before anything imports numpy (generator.numerics)
pytest_plugins = ["support.data", "support.s3"]


def pytest_configure(config):
    # A numpy RuntimeWarning raised in drivegen's own code (an overflow, a NaN cast to an integer) is a bug the
    # suite must show, not a line in its warnings summary.
    for pkg in ("generator", "actors", "schemas"):
        config.addinivalue_line("filterwarnings", f"error::RuntimeWarning:{pkg}")
