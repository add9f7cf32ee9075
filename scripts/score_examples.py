"""Write the example predictions of ``examples/score/`` from ``make run``'s output (``python
scripts/score_examples.py out``): a model that is right on most items and wrong on some, for each scorer, so that
``drivegen score NAME --pred examples/score/... out`` shows a non-trivial score. Seeded: the same run gives the
same files. ``tests/commands/test_examples.py`` scores them on the default run.

- ``qa_answers.json`` (``score qa``): six questions of every question type, answered in turn with the row's own
  answer, its value, the answer in lower case without its full stop, or another question's answer of the same
  type (wrong when its truth differs);
- ``stride/example-model_20260101_000000_t{0..3}.json`` (``score stride``): the bench's questions with an answer
  sentence whose numbers are off by a random share (distance, speed) or angle (direction);
- ``drama_x_predictions.json`` (``score drama-x``): App. B.1 predictions, boxes jittered (a fifth shifted by
  half their width), a sixth of the lateral intents flipped, a seventh of the risks negated;
- ``pie_predictions.json`` (``score pie``): a crossing probability near the truth with noise, a risk class one
  off for a fifth of the risk samples;
- ``intention_predictions.json`` (``score intention``): the logged trajectory with a lateral drift.
"""
from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "examples" / "score"


def _qa(run: str, rng) -> list[dict]:
    from generator.runfolder import RunReader

    rows = RunReader(run).read_table("qa").select(["qa_id", "family", "question_type", "answer", "value"]).to_pylist()
    by_type = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["qa_id"]):
        by_type[(r["family"], r["question_type"])].append(r)
    out = []
    for rs in by_type.values():
        picked = [rs[i] for i in sorted(rng.choice(len(rs), size=min(6, len(rs)), replace=False))]
        for k, r in enumerate(picked):
            style = k % 4
            if style == 0:
                out.append({"qa_id": r["qa_id"], "answer": r["answer"]})
            elif style == 1 and r["value"] is not None:
                out.append({"qa_id": r["qa_id"], "value": r["value"]})
            elif style == 3 and len(rs) > 1:
                other = rs[(rs.index(r) + 1 + int(rng.integers(len(rs) - 1))) % len(rs)]
                out.append({"qa_id": r["qa_id"], "answer": other["answer"]})
            else:
                out.append({"qa_id": r["qa_id"], "answer": r["answer"].lower().rstrip(".")})
    return out


def _stride(run: str, rng) -> dict[int, list[dict]]:
    ann = Path(run) / "bench" / "annotation_files"
    out = {}
    for t in range(4):
        rows = []
        for q in json.loads((ann / f"strideqa_bench_t{t}.json").read_text()):
            parts = []
            for qa_type, gt in q["gt_value"].items():
                if qa_type == "distance":
                    parts.append(f"{gt * rng.uniform(0.7, 1.35):.2f} meters away")
                elif qa_type == "direction":
                    parts.append(f"at {gt + rng.normal(0, 9):.0f} degrees")
                else:
                    parts.append(f"moving at {gt * rng.uniform(0.75, 1.3):.2f} m/s")
            rows.append({k: q[k] for k in ("question_id", "qa_category", "gt_value", "unit") if k in q}
                        | {"pred": "It is " + ", ".join(parts) + "."})
        out[t] = rows
    return out


def _drama(run: str, rng) -> dict:
    from generator.families.drama_x.score import _target_samples

    flip = {"goes to the left": "goes to the right", "goes to the right": "goes to the left",
            "stationary": "goes to the left"}
    gt, _ = _target_samples(run)
    out = {}
    for sid in sorted(gt):
        smp = gt[sid]
        risk = smp["Risk"] if rng.random() > 1 / 7 else {"Yes": "No", "No": "Yes"}[smp["Risk"]]
        d = {"Risk": risk, "Suggested_action": smp["suggested_action"]}
        for group, name in (("Pedestrians", "pedestrian"), ("Cyclists", "cyclist")):
            for k, o in smp[group].items():
                x1, y1, x2, y2 = o["Box"]
                w, h = x2 - x1, y2 - y1
                dx = 0.5 * w if rng.random() < 0.2 else rng.normal(0, 0.05) * w
                box = [round(x1 + dx), round(y1 + rng.normal(0, 0.03) * h), round(x2 + dx), round(y2)]
                intent = list(o["Intent"])
                if rng.random() < 1 / 6:
                    intent[0] = flip[intent[0]]
                d[f"{name}_{k}"] = {"Intent": intent, "Bounding_box": [box]}
        out[sid] = d
    return out


def _pie(run: str, rng) -> list[dict]:
    from generator.families.pie.export import samples_from_run
    from generator.runfolder import RunReader

    samples, _ = samples_from_run(RunReader(run))
    out = []
    for r in samples.select(["sample_id", "task", "crossing", "risk_class"]).to_pylist():
        if r["task"] == "action":
            p = float(np.clip((0.75 if r["crossing"] else 0.25) + rng.normal(0, 0.2), 0, 1))
            out.append({"sample_id": r["sample_id"], "crossing_prob": round(p, 3)})
        else:
            c = r["risk_class"]
            if rng.random() < 0.2:
                c = c + 1 if c < 5 else c - 1
            out.append({"sample_id": r["sample_id"], "risk_class": int(c)})
    return out


def _intention(run: str, rng) -> list[dict]:
    from generator.families.intention_drive.score import load_target

    s, ins, ids, *_ = load_target(run)
    out = []
    for i, sid in enumerate(ids):
        wp = np.asarray(s.future_xy[ins.sample[i]], dtype=np.float64).copy()
        wp[:, 1] += np.linspace(0, rng.normal(0, 0.6), len(wp))
        out.append({"sample_id": sid.as_py() if hasattr(sid, "as_py") else str(sid), "waypoints": np.round(wp, 2).tolist()})
    return out


def main(run: str, out: Path = OUT) -> int:
    rng = np.random.default_rng(0)
    (out / "stride").mkdir(parents=True, exist_ok=True)

    def write(rel: str, obj) -> None:
        text = json.dumps(obj, indent=None, separators=(",", ":"))
        (out / rel).write_text(re.sub(r'\},\{"', '},\n{"', text) + "\n")
        print(f"wrote {out / rel} ({(out / rel).stat().st_size:,} bytes)")

    write("qa_answers.json", _qa(run, rng))
    for t, rows in _stride(run, rng).items():
        write(f"stride/example-model_20260101_000000_t{t}.json", rows)
    write("drama_x_predictions.json", _drama(run, rng))
    write("pie_predictions.json", _pie(run, rng))
    write("intention_predictions.json", _intention(run, rng))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "out"))
