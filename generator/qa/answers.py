"""Reading a model's answer to a quantitative question and judging it, one rule for every scorer of answers
(``drivegen score stride``: ``generator.families.stride_qa.score``; ``drivegen score qa``:
``generator.validate.score.qa``).

The rules are the public STRIDE-QA-Bench toolkit's (``utils/parser.py``, ``utils/metric_utils.py``,
``config/tolerance.yaml``), read and written again here:

- ``parse``: the first match of a number with its unit; direction: a number followed by a degree unit,
  wrapped into [-180, 180]; distance: the first unit (inch, foot, cm, m, km, in that order) found anywhere, in
  metres, never signed; velocity: m/s, then km/h, then mph terms, in m/s, the number spaced from its unit;
  None when nothing matches (a failure);
- ``success``: direction within ``DIRECTION_DEG`` of the truth (wrapped difference), distance within the
  truth x [1 - ``DISTANCE_REL``, 1 + ``DISTANCE_REL``], velocity within the truth x [1 - ``VELOCITY_REL``,
  1 + ``VELOCITY_REL``] or, for a truth below ``VELOCITY_FLOOR_MPS``, within ``VELOCITY_FLOOR_MPS *
  VELOCITY_REL`` (0.1 m/s) of it; ends included.
"""
from __future__ import annotations

import math
import re

from schemas.errors import InputError

DIRECTION_DEG = 10.0
DISTANCE_REL = 0.25
VELOCITY_REL = 0.2
VELOCITY_FLOOR_MPS = 0.5
"""the toolkit's ``config/tolerance.yaml``: below the floor the tolerance is ``floor * VELOCITY_REL``"""

_NUM = r"(\d+\.?\d*)"
_DIRECTION = re.compile(r"([-+]?\d+(?:\.\d+)?)\s*-?\s*(?:°|deg(?:ree)?s?)", re.I)
_DISTANCE_UNITS = [(("inch", "inches", "in"), 0.0254), (("foot", "feet", "ft"), 0.3048),
                   (("cm", "centimeters", "centimetres"), 0.01),
                   (("m", "meter", "meters", "metre", "metres"), 1.0),
                   (("km", "kilometer", "kilometers", "kilometre", "kilometres"), 1000.0)]
_VELOCITY_UNITS = [(("m/s", "m s-1", r"m s\^1", "m s⁻1", "mps", "meter per second", "meters per second",
                     "metre per second", "metres per second"), 1.0),
                   (("km/h", "km h-1", "kmh", "kph", "kilometer per hour", "kilometers per hour",
                     "kilometre per hour", "kilometres per hour"), 1 / 3.6),
                   (("mph", "mile per hour", "miles per hour"), 1609.34 / 3600)]


def parse(qa_type: str, text: str) -> float | None:
    """The number an answer states for ``qa_type`` (metres, degrees, m/s), or None (see the module doc)."""
    text = text if isinstance(text, str) else ""
    if qa_type == "direction":
        m = _DIRECTION.search(text)
        if not m:
            return None
        a = float(m.group(1))
        return ((a + 180) % 360) - 180 if a < -180 or a > 180 else a
    if qa_type == "distance":
        for names, factor in _DISTANCE_UNITS:
            m = re.search(_NUM + r"\s*(" + "|".join(names) + r")\b(?!/)", text, re.I)
            if m:
                return float(m.group(1)) * factor
        return None
    if qa_type == "velocity":
        for terms, factor in _VELOCITY_UNITS:
            for term in terms:
                pattern = re.escape(term).replace(r"\ ", r"\s+")
                m = re.search(_NUM + r"\s*\b(" + pattern + r")\b", text, re.I)
                if m:
                    return float(m.group(1)) * factor
        return None
    raise InputError(f"unknown quantity {qa_type!r} in gt_value (known: direction, distance, velocity)")


def success(qa_type: str, gt: float, pred: float | None) -> bool:
    """Whether ``pred`` is within the bench's tolerance of ``gt`` (see the module doc)."""
    if pred is None or not math.isfinite(pred):
        return False
    if qa_type == "direction":
        return abs((pred - gt + 180) % 360 - 180) <= DIRECTION_DEG
    if qa_type == "distance":
        return gt * (1 - DISTANCE_REL) <= pred <= gt * (1 + DISTANCE_REL)
    if gt < VELOCITY_FLOOR_MPS:
        return abs(pred - gt) <= VELOCITY_FLOOR_MPS * VELOCITY_REL
    return gt * (1 - VELOCITY_REL) <= pred <= gt * (1 + VELOCITY_REL)




QUANTITY_OF_UNIT = {"m": "distance", "degrees": "direction", "m/s": "velocity"}
"""the quantity a QA row's ``unit`` states, for ``parse`` and ``success``"""
