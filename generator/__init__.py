"""drivegen's pipeline, commands and paper families.

Importing the package pins numpy's floating-point kernels for this process (``generator.numerics``): it must
happen before numpy is imported, so it happens here, the first thing every ``drivegen`` command loads.
"""
from generator.numerics import pin_numpy as _pin_numpy

_pin_numpy()
