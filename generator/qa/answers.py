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
from dataclasses import dataclass

from schemas.errors import InputError

DIRECTION_DEG = 10.0
DISTANCE_REL = 0.25
VELOCITY_REL = 0.2
VELOCITY_FLOOR_MPS = 0.5
"""the toolkit's ``config/tolerance.yaml``: below the floor the tolerance is ``floor * VELOCITY_REL``"""

_NUM = r"(?<!\d)(\d++(?:\.\d*+)?+)"
"""a number as the toolkit reads it (``\\d+\\.?\\d*``), written so that a regex search stays linear in the answer's
length: it starts only where no digit precedes it and never gives back a digit it took (possessive
quantifiers): giving one back cannot make the unit that must follow match, since a unit never starts with a
digit or a dot; the toolkit's backtracking form takes cubic time on a long run of digits (800 digits: 25 s)"""
_DIRECTION = re.compile(r"([-+]?+(?<!\d)\d++(?:\.\d++)?+)\s*+-?+\s*+(?:°|deg(?:ree)?s?)", re.I)
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
            m = re.search(_NUM + r"\s*+(" + "|".join(names) + r")\b(?!/)", text, re.I)
            if m:
                return float(m.group(1)) * factor
        return None
    if qa_type == "velocity":
        for terms, factor in _VELOCITY_UNITS:
            for term in terms:
                pattern = re.escape(term).replace(r"\ ", r"\s+")
                m = re.search(_NUM + r"\s*+\b(" + pattern + r")\b", text, re.I)
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


# ------------------------------------------------------------------------------------------------ choices
# How a careful annotator reads the answer to a question of choice (``drivegen score qa``): the question type
# declares its form (``generator.qa.fields.QuestionType.reading``); the reader finds the choice in a short or a
# long answer, in any order, and says None when the answer names none or contradicts itself. Every pattern
# below is linear in the answer's length (no nested quantifiers; tokens are matched as lists).

_REGION = re.compile(r"region\s*+\[\s*+(\d++)\s*+\]")
_TOKEN = re.compile(r"region\d++|[a-z]++|\d++(?:\.\d++)?+")
_NUMBER_WORDS = {w: i + 1 for i, w in enumerate(("one", "two", "three", "four", "five", "six", "seven", "eight",
                                                  "nine", "ten", "eleven", "twelve"))}
NEGATIONS = frozenset({"not", "never"})
_SPELLING = {"center": "centre", "toward": "towards", "meters": "metres", "meter": "metre"}


def tokens(text) -> list[str]:
    """Lower-case words, numbers and ``region<N>`` of an answer: "n't" reads "not", "o'clock" one word
    ``oclock``, US spellings the British ones (center -> centre), punctuation dropped."""
    t = str(text).lower().replace("\u2019", "'").replace("n't", " not").replace("o'clock", " oclock ")
    t = _REGION.sub(lambda m: f" region{m.group(1)} ", t)
    return [_SPELLING.get(w, w) for w in _TOKEN.findall(t)]


def _phrase(text: str) -> tuple[str, ...]:
    return tuple(tokens(text))


def _find(toks: list[str], phrases: dict[tuple[str, ...], object]) -> list[tuple[int, int, object]]:
    """(start, end, meaning) of every phrase found in ``toks``, longest first: a phrase that overlaps a longer
    one found is dropped (``in the centre`` does not also count the ``centre`` it holds). Linear in the
    answer's length for a fixed set of phrases."""
    hits = []
    for ph, meaning in phrases.items():
        n = len(ph)
        for i, w in enumerate(toks):
            if w == ph[0] and tuple(toks[i:i + n]) == ph:
                hits.append((i, i + n, meaning))
    hits.sort(key=lambda h: (h[0] - h[1], h[0]))
    taken = bytearray(len(toks))
    out = []
    for h in hits:
        if not any(taken[h[0]:h[1]]):
            taken[h[0]:h[1]] = b"\x01" * (h[1] - h[0])
            out.append(h)
    return sorted(out)


def _negated(toks: list[str], start: int) -> bool:
    """Whether a 'not' stands within the three words before ``start`` (no region in between)."""
    for w in reversed(toks[max(0, start - 3):start]):
        if w.startswith("region"):
            return False
        if w in NEGATIONS:
            return True
    return False


def yes_no(text) -> float | None:
    """1.0 / 0.0 for the first 'yes' / 'no' word of an answer ("Yes. Its path crosses ...", "I'd say no"),
    None without one."""
    for w in tokens(text):
        if w == "yes":
            return 1.0
        if w == "no":
            return 0.0
    return None


def _ego_first(toks: list[str], start: int, end: int) -> bool:
    """Whether the predicate's phrase at ``toks[start:end]`` is said of the ego vehicle rather than of the
    region: the phrase is followed by the region ("... to the left of Region [1]", "... of it"), or followed
    by neither and preceded most closely by the ego ("The ego vehicle is behind.")."""
    for w in toks[end:end + 6]:
        if w.startswith("region") or w == "it":
            return True
        if w == "ego":
            return False
    for w in reversed(toks[:start]):
        if w.startswith("region") or w == "it":
            return False
        if w == "ego":
            return True
    return False


@dataclass(frozen=True)
class Relation:
    """A yes/no question whose answer may also be stated with the words of its predicate: ``true`` phrases say
    it holds ("left", "above"), ``false`` phrases say the opposite ("right", "below"); "not" before one flips
    it. ``subject``: who the words are about. 'pair' (two regions, A and B): "B is below A" says A is above B,
    a phrase followed by A ("to the right of Region [A]") or preceded only by B is read from B's side. 'ego'
    (the ego and one region): a phrase said of the ego ("the ego vehicle is to the right of Region [1]", "...
    of it", ``_ego_first``) is read from the ego's side. A 'yes' / 'no' word decides before any phrase."""

    true: tuple[str, ...] = ()
    false: tuple[str, ...] = ()
    subject: str | None = None
    kind: str = "relation"

    def read(self, text, region_a: str | None = None, region_b: str | None = None) -> float | None:
        yn = yes_no(text)
        if yn is not None:
            return yn
        toks = tokens(text)
        table = {**{_phrase(p): 1.0 for p in self.true}, **{_phrase(p): 0.0 for p in self.false}}
        said = set()
        for start, end, v in _find(toks, table):
            if _negated(toks, start):
                v = 1.0 - v
            after = next((w for w in toks[end:end + 6] if w.startswith("region")), None)
            if self.subject == "ego" and _ego_first(toks, start, end):
                v = 1.0 - v
            elif self.subject == "pair":
                before = next((w for w in reversed(toks[:start]) if w.startswith("region")), None)
                if (after is not None and after == region_a) or (after is None and before is not None
                                                                 and before == region_b):
                    v = 1.0 - v
            said.add(v)
        return said.pop() if len(said) == 1 else None


@dataclass(frozen=True)
class Sided:
    """A position relative to the ego, of several (behind / in front / beside), said of the region or of the
    ego: ``options[i]`` are the phrases of position ``i``; ``mirror[i]`` the position the same words give when
    the ego is their subject ("the ego vehicle is behind Region [0]": Region [0] is in front). Without a
    subject ("Behind it.", "Ahead, that is it.") the words are the region's, as the question asks of it. A
    negated phrase ("not behind") names no single position: the answer is not read."""

    options: tuple[tuple[str, ...], ...]
    mirror: tuple[int, ...]
    kind: str = "choice"

    def read(self, text, region_a=None, region_b=None) -> int | None:
        toks = tokens(text)
        table = {_phrase(p): i for i, ps in enumerate(self.options) for p in ps}
        said = set()
        for start, end, i in _find(toks, table):
            if _negated(toks, start):
                return None
            subject = next((w for w in reversed(toks[:start]) if w == "ego" or w.startswith("region")), None)
            said.add(self.mirror[i] if subject == "ego" else i)
        return said.pop() if len(said) == 1 else None


@dataclass(frozen=True)
class Choice:
    """A choice from a vocabulary: ``options[i]`` are the phrases meaning choice ``i`` (its name, its phrase in
    the templates, synonyms); the answer's choice is the one whose phrases it names (the longest phrase at a
    place wins), None when it names none or two."""

    options: tuple[tuple[str, ...], ...]
    kind: str = "choice"

    def read(self, text, region_a=None, region_b=None) -> int | None:
        table = {_phrase(p): i for i, ps in enumerate(self.options) for p in ps}
        said = {i for _, _, i in _find(tokens(text), table)}
        return said.pop() if len(said) == 1 else None


@dataclass(frozen=True)
class Clock:
    """A clock position: "At 1 o'clock.", "one o'clock", "1 oclock", or an answer that is the hour alone."""

    kind: str = "clock"

    def read(self, text, region_a=None, region_b=None) -> int | None:
        toks = tokens(text)
        said = set()
        for i, w in enumerate(toks):
            if w == "oclock" and i > 0:
                w = toks[i - 1]
                h = _NUMBER_WORDS.get(w) or (int(w) if w.isdigit() and len(w) <= 2 else None)
                if h is not None and 1 <= h <= 12:
                    said.add(h)
        if not said and len(toks) == 1 and toks[0].isdigit() and len(toks[0]) <= 2 and 1 <= int(toks[0]) <= 12:
            said.add(int(toks[0]))
        return said.pop() if len(said) == 1 else None


@dataclass(frozen=True)
class Pair:
    """Two choices at once (DRAMA-X's intent: lateral x vertical), value = ``len(second options) * first +
    second``; a component the answer does not name is ``default`` ("is going to the left" is left and
    stationary towards the ego); ``still`` phrases set both to their defaults ("is standing still")."""

    first: Choice
    second: Choice
    defaults: tuple[int, int]
    still: tuple[str, ...] = ()
    kind: str = "pair"

    def read(self, text, region_a=None, region_b=None) -> int | None:
        toks = tokens(text)
        parts = []
        for c, d in ((self.first, self.defaults[0]), (self.second, self.defaults[1])):
            said = {i for _, _, i in _find(toks, {_phrase(p): i for i, ps in enumerate(c.options) for p in ps})}
            if len(said) > 1:
                return None
            parts.append(said.pop() if said else None)
        if parts == [None, None] and not _find(toks, {_phrase(p): 0 for p in self.still}):
            return None
        a, b = (self.defaults[0] if parts[0] is None else parts[0]), (self.defaults[1] if parts[1] is None
                                                                      else parts[1])
        return len(self.second.options) * a + b


_SIGNED = re.compile(r"[-+]?+\d++(?:\.\d++)?+")


@dataclass(frozen=True)
class Numbers:
    """A list of numbers (a trajectory's waypoints, "[PT, (x1, y1), ...]"): right when the answer gives as many
    numbers as the truth and each equals the truth's at the precision the truth prints."""

    kind: str = "numbers"

    def read(self, text, region_a=None, region_b=None) -> list[str]:
        return _SIGNED.findall(str(text))


def same_at_precision(pred: list[str], truth: list[str]) -> bool:
    """Whether the numbers ``pred`` equal ``truth``'s one by one at the decimals each truth number prints."""
    if len(pred) != len(truth) or not truth:
        return False
    for p, t in zip(pred, truth):
        d = len(t.split(".", 1)[1]) if "." in t else 0
        if abs(float(p) - float(t)) > 0.5 * 10 ** -d + 1e-12:
            return False
    return True


# ------------------------------------------------------------------------------------------------ numbers
_BARE_AFTER = frozenset({"away", "apart", "wide", "tall", "long", "high", "horizontally", "vertically", "ahead",
                         "now", "from", "between", "and"})
_RADIANS = re.compile(r"([-+]?+(?<!\d)\d++(?:\.\d++)?+)\s*+rad(?:ians?)?\b", re.I)


def parse_lenient(qa_type: str, text) -> float | None:
    """``parse`` (the bench's rules), else what a careful annotator also reads: a direction in radians, or the
    answer's one number without a unit (regions and clock hours aside) in the question's own unit (metres,
    degrees, m/s), when no unknown unit follows it ("24.9." but not "24.9 yards")."""
    got = parse(qa_type, text)
    if got is not None or not isinstance(text, str):
        return got
    if qa_type == "direction":
        m = _RADIANS.search(text)
        if m:
            a = math.degrees(float(m.group(1)))
            return ((a + 180) % 360) - 180 if a < -180 or a > 180 else a
    toks = tokens(text.replace("-", " minus "))
    nums = [i for i, w in enumerate(toks) if w[0].isdigit() and not (i + 1 < len(toks) and toks[i + 1] == "oclock")]
    if len(nums) != 1:
        return None
    i = nums[0]
    if i + 1 < len(toks) and toks[i + 1] not in _BARE_AFTER:
        return None
    v = float(toks[i])
    return -v if i > 0 and toks[i - 1] == "minus" else v


def stated_decimals(qa_type: str, text) -> int | None:
    """The decimals of the number ``parse`` reads from ``text`` (the truth's sentence: "0.00 m" -> 2)."""
    if not isinstance(text, str):
        return None
    if qa_type == "direction":
        m = _DIRECTION.search(text)
    elif qa_type == "distance":
        m = next((m for names, _ in _DISTANCE_UNITS
                  for m in [re.search(_NUM + r"\s*+(" + "|".join(names) + r")\b(?!/)", text, re.I)] if m), None)
    else:
        m = next((m for terms, _ in _VELOCITY_UNITS for term in terms
                  for m in [re.search(_NUM + r"\s*+\b(" + re.escape(term).replace(r"\ ", r"\s+") + r")\b", text,
                                      re.I)] if m), None)
    if not m:
        return None
    s = m.group(1)
    return len(s.split(".", 1)[1]) if "." in s else 0


def equal_at_precision(qa_type: str, truth: float, pred: float, decimals: int) -> bool:
    """Whether ``pred`` is the stated ``truth`` at its ``decimals`` (a direction wrapped): "0.0006 m" for a
    truth of "0.00 m" is right, where a relative tolerance of a zero truth admits nothing."""
    d = pred - truth
    if qa_type == "direction":
        d = (d + 180) % 360 - 180
    return abs(d) <= 0.5 * 10 ** -decimals + 1e-12
