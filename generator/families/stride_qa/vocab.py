"""This family's vocabularies (the strings are part of the dataset: they follow the paper's spelling)."""
from __future__ import annotations

from dataclasses import dataclass

@dataclass(frozen=True)
class Scenario:
    """A STRIDE-QA-Bench scene-group relation (App. C.2, Table 8). ``key`` is the machine spelling the
    generated logs script (``drivegen_scenarios.json``), ``name`` the readable one (the paper's), ``toolkit``
    the spelling the public STRIDE-QA-Bench toolkit groups its results by (``turingmotors/STRIDE-QA-Dataset``,
    ``benchmarks/STRIDE-QA-Bench/src/strideqa_bench/visualize/visualize.py``: its major relations and the
    ``Minor_Relations`` panel of the rest), which the bench export writes."""

    key: str
    name: str
    toolkit: str


BENCH_SCENARIOS = (
    Scenario("oncoming_pass", "Oncoming Pass", "Oncoming_Pass"),
    Scenario("maintain_state", "Maintain State", "Maintain_State"),
    Scenario("overtake", "Overtake", "Overtake"),
    Scenario("path_divergence", "Path Divergence", "Path_Divergence_at_Intersection"),
    Scenario("pulling_away", "Pulling Away From Ego", "Other_Pulling_Away_From_Ego"),
    Scenario("minor_relations", "Minor Relations", "Minor_Relations"),
)


BENCH_SCENARIO_NAMES = tuple(s.name for s in BENCH_SCENARIOS)


SCENARIO_NAME = {s.key: s.name for s in BENCH_SCENARIOS}


TOOLKIT_RELATION = {s.name: s.toolkit for s in BENCH_SCENARIOS}  # readable name -> the toolkit's spelling

