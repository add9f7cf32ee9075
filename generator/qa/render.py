"""Columnar rendering: numbers to fixed-decimal strings and templates to whole string columns at once.

``format_fixed`` prints a float column with N decimals using integer arithmetic in numpy and Arrow's
integer-to-string cast (no per-row Python): value -> round(|v| * 10^N) -> integer and fraction parts ->
``sign + int + '.' + zero-padded fraction``. The printed number equals the value rounded half-to-even at
N decimals of its binary value (so |printed - value| <= 0.5 * 10^-N up to float error). Rows whose
|v| * 10^N reaches 2^53 (|v| >= 9.007e13 at 2 decimals: no real distance or speed) are printed exactly by
Python's float formatting instead: above 2^53 the float product can be off by more than one unit of the last
digit, and from 2^63 on it overflows int64 (issue #11 item 7: "-92233720368547759.92 m/s").
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.qa.fields import UNIT_TEXT, QuestionType
from generator.qa.templates import Placeholder, Template

_FRACTIONS: dict[int, pa.Array] = {}


def _fraction_table(decimals: int) -> pa.Array:
    if decimals not in _FRACTIONS:
        n = 10 ** decimals
        _FRACTIONS[decimals] = pa.array([str(i).zfill(decimals) for i in range(n)], pa.string())
    return _FRACTIONS[decimals]


_EXACT_INTEGERS = float(2 ** 53)  # float64 holds every integer below this: the columnar path stays exact


def format_fixed(values: np.ndarray, decimals: int, suffix: str = "") -> pa.Array:
    """Float64 (N,) -> Arrow strings with ``decimals`` digits after the point (+ ``suffix``). Non-finite -> null.

    Correct for every finite float64: one minus sign at most, never "-0.00"; rows beyond the columnar
    path's range (see the module docstring) are formatted one by one, the others stay columnar."""
    v = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(v)
    scale = 10 ** decimals
    with np.errstate(over="ignore"):  # |v| * scale beyond float64 is inf: one of the 'huge' rows below
        scaled = np.rint(np.where(finite, np.abs(v), 0.0) * scale)
    huge = scaled >= _EXACT_INTEGERS  # also |v| * scale = inf
    any_huge = bool(huge.any())
    if any_huge:
        scaled[huge] = 0.0
    q = scaled.astype(np.int64)
    ip = q // scale
    neg = (v < 0) & (q != 0)
    parts = [pc.if_else(pa.array(neg), "-", ""), pc.cast(pa.array(ip), pa.string())]
    if decimals > 0:
        if decimals <= 4:
            frac = pc.take(_fraction_table(decimals), pa.array(q - ip * scale))
        else:
            frac = pc.utf8_lpad(pc.cast(pa.array(q - ip * scale), pa.string()), decimals, "0")
        parts += [".", frac]
    if suffix:
        parts.append(suffix)
    out = pc.binary_join_element_wise(*parts, "")
    if any_huge:
        exact = [f"{x:.{decimals}f}{suffix}" for x in v[huge].tolist()]
        out = pc.replace_with_mask(out, pa.array(huge), pa.array(exact, pa.string()))
    if not finite.all():
        out = pc.if_else(pa.array(finite), out, pa.scalar(None, pa.string()))
    return out


def format_quantity(values: np.ndarray, unit: str, decimals: int) -> pa.Array:
    """The one way drivegen prints a quantity: ``format_fixed`` with ``decimals`` (``cfg.qa.decimals`` unless a
    template asks for another) and the unit's text (``UNIT_TEXT``): ``[-0.004, 15.0]``, 'deg', 2 ->
    ``['0.00 degrees', '15.00 degrees']``. The STRIDE-QA-Bench export prints its numbers with the same
    ``format_fixed`` and decimals (``generator.families.stride_qa.bench_export``)."""
    return format_fixed(values, decimals, " " + UNIT_TEXT[unit])


class FieldColumns:
    """The field values of one batch of questions of one type. Text fields are either Arrow string arrays or
    lazy ``(vocabulary, index array)`` pairs (materialised by one ``take`` when a template first uses them);
    quantity fields are float64 numpy arrays. Formatted/transformed columns are cached so that the templates
    of a batch share them."""

    def __init__(self, qt: QuestionType, text: dict, quantities: dict[str, np.ndarray], default_decimals: int):
        missing = [f.name for f in qt.fields if f.name not in text and f.name not in quantities]
        self.missing = set(missing)
        self.qt = qt
        self.text = text
        self.quantities = quantities
        self.decimals = default_decimals
        self._cache: dict[tuple, pa.Array] = {}

    def slice(self, start: int, length: int) -> "FieldColumns":
        sub = FieldColumns.__new__(FieldColumns)
        sub.qt, sub.decimals, sub._cache, sub.missing = self.qt, self.decimals, {}, self.missing
        sub.text = {k: (v[0], v[1][start:start + length]) if isinstance(v, tuple) else v.slice(start, length)
                    for k, v in self.text.items()}
        sub.quantities = {k: v[start:start + length] for k, v in self.quantities.items()}
        return sub

    def _text(self, name: str) -> pa.Array:
        v = self.text[name]
        if isinstance(v, tuple):
            v = pc.take(v[0], pa.array(v[1]))
            self.text[name] = v
        return v

    def column(self, ph: Placeholder) -> pa.Array:
        key = (ph.name, ph.spec)
        if key in self._cache:
            return self._cache[key]
        if ph.name in self.missing:
            raise ValueError(f"{self.qt.family}/{self.qt.name}: generator did not provide field '{ph.name}'")
        f = self.qt.field(ph.name)
        if f.kind == "quantity":
            dec = int(ph.spec[1]) if ph.spec else self.decimals
            out = format_quantity(self.quantities[ph.name], f.unit, dec)
        else:
            out = self._text(ph.name)
            if ph.spec == "upper":
                out = pc.utf8_upper(out)
            elif ph.spec == "lower":
                out = pc.utf8_lower(out)
            elif ph.spec == "capitalize":
                first = pc.utf8_upper(pc.utf8_slice_codeunits(out, 0, 1))
                out = pc.binary_join_element_wise(first, pc.utf8_slice_codeunits(out, 1), "")
        self._cache[key] = out
        return out


def render_parts(parts: tuple, cols: FieldColumns, n: int) -> pa.Array:
    """Join literal parts and field columns row-wise -> Arrow string array of length n."""
    pieces = [cols.column(p) if isinstance(p, Placeholder) else p for p in parts]
    if not any(isinstance(p, pa.Array) for p in pieces):
        return pc.take(pa.array(["".join(pieces)], pa.string()), pa.array(np.zeros(n, np.int32)))
    if len(pieces) == 1:
        return pieces[0]
    return pc.binary_join_element_wise(*pieces, "")


def render(template: Template, cols: FieldColumns, n: int) -> tuple[pa.Array, pa.Array]:
    """(question, answer) string arrays for ``n`` rows rendered with one template."""
    return render_parts(template.question, cols, n), render_parts(template.answer, cols, n)
