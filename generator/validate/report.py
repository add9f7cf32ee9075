"""The validation report: STRIDE-QA Table 6 style Markdown plus the full JSON, and the pass/fail gates."""
from __future__ import annotations

import json
import math

# gate name -> (path into the report, comparison). 'min' passes when value >= threshold, 'max' when <=.
GATES = {
    "min_map": (("detection", "mAP"), "min"),
    "min_nds": (("detection", "NDS"), "min"),
    "min_amota": (("tracking", "AMOTA"), "min"),
    "max_idsw": (("tracking", "IDSW"), "max"),
    "min_label_agreement": (("label_agreement", "agreement"), "min"),
}


def _get(report: dict, path: tuple[str, ...]):
    cur = report
    for k in path:
        if not isinstance(cur, dict) or cur.get(k) is None:
            return None
        cur = cur[k]
    return cur


def check_gates(report: dict, gates: dict) -> tuple[dict, bool]:
    """Evaluate the requested gates ({'min_map': 0.5, ...}; None entries are ignored).

    A gate whose figure is missing (e.g. no label agreement computed) fails: a requested check that
    cannot be made must not pass silently.
    """
    out, ok_all = {}, True
    for name, threshold in (gates or {}).items():
        if threshold is None:
            continue
        if name not in GATES:
            raise ValueError(f"unknown gate {name!r}; known: {sorted(GATES)}")
        path, kind = GATES[name]
        value = _get(report, path)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            ok = False
        else:
            ok = value >= threshold if kind == "min" else value <= threshold
        out[name] = {"metric": ".".join(path), "threshold": threshold, "value": value, "ok": bool(ok)}
        ok_all &= bool(ok)
    return out, ok_all


def _count(v):
    return None if v is None else int(round(v))


def _fmt(v, digits: int = 3) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, str)):
        return f"{v}"
    return f"{v:.{digits}f}"


def to_markdown(r: dict) -> str:
    d, t, a, sc = r["detection"], r["tracking"], r.get("label_agreement"), r["scenes"]
    L = [f"# drivegen validate: {r['run']}", "",
         f"Logs: `{r['logs']}` ({r['source'].get('kind')}). Scenes evaluated: {len(sc['evaluated'])}, "
         f"annotated samples: {sc['num_samples']}. Unlabelled scenes (excluded): "
         f"{', '.join(sc['unlabelled']) if sc['unlabelled'] else 'none'}.", ""]
    gaps = r.get("perception_gaps")
    if gaps:
        L += [f"Scored samples without any prediction: {gaps['scored_without_predictions']}; on frames perception "
              f"failed on (the run's issues table): {gaps['scored_failed_frames']}."
              + (" **Not a pass**: those frames' objects are scored as missed. First: "
                 + "; ".join(f"{e['scene_id']} frame {e['frame_index']} ({e['stage']}: {e['reason']}"
                             f"{', ' + e['file'] if e.get('file') else ''})" for e in gaps["examples"][:3])
                 if gaps["scored_failed_frames"] else ""), ""]
    L += ["## Summary (STRIDE-QA Table 6)", "",
          "| Task | Metric | Score |", "|---|---|---|"]
    rows = [("Detection", "mAP", d["mAP"]), ("", "mATE (m)", d["mATE"]), ("", "mASE", d["mASE"]),
            ("", "mAOE (rad)", d["mAOE"]), ("", "mAVE (m/s)", d["mAVE"]), ("", "mAAE", d["mAAE"]),
            ("", "NDS", d["NDS"])]
    fp = d.get("false_positives")
    if fp is not None:
        absent = ", ".join(f"{c} {n}" for c, n in fp["classes_without_gt"].items())
        rows += [("", f"False positives (no GT within {fp['dist_th_m']:g} m)",
                  f"{fp['num_fp']} ({_fmt(fp['fp_rate'], 2)} of predictions, "
                  f"{_fmt(fp['fp_per_sample'], 2)} per sample)"),
                 ("", "... of classes without GT (not in the means)",
                  f"{fp['num_fp_classes_without_gt']}" + (f" ({absent})" if absent else ""))]
    if t is not None:
        rows += [("Tracking", "AMOTA", t["AMOTA"]), ("", "AMOTP (m)", t["AMOTP"]), ("", "Recall", t["recall"]),
                 ("", "MOTA", t["MOTA"]), ("", "IDSW", _count(t["IDSW"])), ("", "Fragmentations", _count(t["FRAG"]))]
    if a is not None:
        rows.append(("Label noise", "QA answers within tolerance", a.get("agreement")))
    L += [f"| {task} | {m} | {_fmt(v)} |" for task, m, v in rows]
    L += ["", f"Detection figures average over the {len(d['classes'])} classes with ground truth "
              f"({', '.join(d['classes'])}); NDS terms: {', '.join(d['nds_terms'])}"
              f"{'' if d['has_attributes'] else ' (the logs carry no attributes: mAAE is not defined)'}. "
              f"Devkit ten-class figures: mAP {_fmt(d['all_classes']['mAP'])}, "
              f"NDS {_fmt(d['all_classes']['NDS'])}. Boxes of a class without ground truth leave those means "
              f"unchanged; they are counted as false positives (FP: no GT box of the class within the devkit's "
              f"TP distance, matched greedily by score as the devkit does; FP rate: share of the class's "
              f"predictions).",
          (f"Tracking: {t['num_gt_tracks']} GT tracks over {t['num_frames']} frames, {t['num_thresholds']} recall "
           f"thresholds (devkit: 40), {t['workers']} worker(s)." if t is not None else "Tracking: not evaluated."),
          ""]
    L += ["## Detection per class", "",
          "| Class | GT | Pred | FP | FP rate | FP/sample | AP | AP@0.5 | AP@1 | AP@2 | AP@4 | ATE | ASE | AOE | AVE "
          "| AAE |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c, m in d["per_class"].items():
        if not m["has_gt"] and not m["num_pred"]:
            continue
        ap = m["AP_by_dist"]
        L.append(f"| {c} | {m['num_gt']} | {m['num_pred']} | {_fmt(m.get('num_fp'))} | {_fmt(m.get('fp_rate'), 2)} | "
                 f"{_fmt(m.get('fp_per_sample'), 2)} | {_fmt(m['AP'])} | {_fmt(ap['0.5'])} | {_fmt(ap['1.0'])} | "
                 f"{_fmt(ap['2.0'])} | {_fmt(ap['4.0'])} | {_fmt(m['ATE'])} | {_fmt(m['ASE'])} | {_fmt(m['AOE'])} | "
                 f"{_fmt(m['AVE'])} | {_fmt(m['AAE'])} |")
    if t is not None:
        L += ["", "## Tracking per class", "",
              "| Class | GT tracks | AMOTA | AMOTP | Recall | MOTA | MOTP | IDSW | Frag | FP | FN |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c, m in (t["per_class"] if t is not None else {}).items():
        if not m["has_gt"]:
            continue
        L.append(f"| {c} | {m['num_gt_tracks']} | {_fmt(m['amota'])} | {_fmt(m['amotp'])} | {_fmt(m['recall'])} | "
                 f"{_fmt(m['mota'])} | {_fmt(m['motp'])} | {_fmt(_count(m['ids']))} | {_fmt(_count(m['frag']))} | "
                 f"{_fmt(_count(m['fp']))} | {_fmt(_count(m['fn']))} |")
    ident = r.get("track_identity")
    if ident is not None:
        L += ["", "## Track identities (every class, any range)", "",
              "The logs' own identity of each box (`instance_token`) against its track: a merged track carries "
              "two or more identities, a foreign box carries another identity than most of its track's boxes, a "
              "bridge box (no identity) lies in a track between two different ones, a split identity spans two "
              "or more tracks.", "",
              "| Class | Tracks | Identities | Merged tracks | Foreign boxes | Bridge boxes | Split identities |",
              "|---|---|---|---|---|---|---|"]
        for c, m in [*ident["per_class"].items(), ("all", ident["all"])]:
            L.append(f"| {c} | {m['tracks']} | {m['identities']} | {m['merged_tracks']} | {m['foreign_boxes']} | "
                     f"{m['bridge_boxes']} | {m['split_identities']} |")
    if a is not None:
        L += ["", "## Label noise (QA re-run on the labels)", "", a.get("note", ""), ""]
        if a.get("by_question_type"):
            L += ["| Question type | Compared | Within tolerance | Share |", "|---|---|---|---|"]
            for q, m in sorted(a["by_question_type"].items()):
                L.append(f"| {q} | {m['compared']} | {m['within']} | {_fmt(m['agreement'])} |")
        L += ["", f"Quantitative perception answers: {a.get('perception_answers', 0)}; compared with a label answer "
                  f"(object-dependent types): {a.get('compared', 0)}; target not matched to a labelled object: "
                  f"{a.get('unmatched_target', 0)}; "
                  f"no label answer for the matched target: {a.get('no_label_answer', 0)}."]
    if r.get("gates"):
        L += ["", "## Gates", "", "| Gate | Metric | Threshold | Value | OK |", "|---|---|---|---|---|"]
        for name, g in r["gates"].items():
            L.append(f"| --{name.replace('_', '-')} | {g['metric']} | {g['threshold']} | {_fmt(g['value'])} | "
                     f"{'yes' if g['ok'] else 'NO'} |")
    tm = r["timings"]
    L += ["", "Timings: " + ", ".join(f"{k[:-2]} {v:.1f} s" for k, v in tm.items()), ""]
    return "\n".join(L)


def _clean(o):
    if isinstance(o, float) and (math.isnan(o) or math.isinf(o)):
        return None
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if hasattr(o, "item") and not isinstance(o, (str, bytes)):
        return _clean(o.item())
    return o


def to_json(r: dict) -> str:
    return json.dumps(_clean(r), indent=1, sort_keys=False) + "\n"
