"""``drivegen score drama-x --protocol public``: DRAMA-X's public evaluation scripts (``taco-group/DRAMA-X``,
``evaluation/od_intent_eval.py``, ``risk_eval.py``, ``action_eval.py``), their rules read there and written
again here, case for case, so that a figure drivegen prints under this protocol is the figure the scripts print.

- **The window**: the scripts score the first ``len(predictions)`` ground-truth samples in the order of the
  ground-truth file (``drama_x.json``: scenes sorted, frames in order), whichever samples the predictions hold.
- **OD** (``evaluate_bounding_boxes``, IoU threshold ``od_iou``, theirs 0.25): a sample of the window without a
  prediction is skipped whole (its objects are not counted). Per ground-truth object, pedestrians then cyclists,
  the best IoU over the prediction's keys naming its class (a pedestrian: a key containing "pedestrian" or
  "person"; a cyclist: "cyclist"; any case) that hold a ``Bounding_box``; correct at ``>=`` the threshold. A
  predicted box may serve any number of ground-truth objects (no one-to-one matching): one box covering two
  pedestrians detects both.
- **Intents** (``evaluate_intents``, IoU threshold ``match_iou``, theirs 0.6): every ground-truth object of the
  window with a non-empty intent list counts, with or without a prediction for its sample (a sample without one
  gets all its intents wrong); the best-IoU prediction as for OD, matched at ``>=`` the threshold, its ``Intent``
  (a string is both intents) compared element by element: LIP = right lateral / objects, VIP = right vertical /
  objects, overall = right intents / all intents (the mean of LIP and VIP when every object has both).
- **Boxes** as the scripts read them: ``Bounding_box`` (a lower-case ``bounding_box`` alone makes them fail on
  the sample), a one-element list holding the box, a dict's values, ``None`` as 0; a coordinate strictly between
  0 and 1 is rescaled by their fixed image size, x by 1520 and y by 2704 (``image_dimensions``: ``shape =
  (1520, 2704)``, index ``i % 2 == 1`` -> 2704, so x and y are swapped against the 2704 x 1520 images).
  IoU is theirs: 0 when the boxes only touch or a union is empty.
- **Failures**: where the scripts raise inside a sample (a box that is a list of four boxes, a key they index
  that is absent, a non-number), they drop the rest of that sample and keep what was counted before; so does
  this protocol, and each such sample is named in ``problems`` ("the public scripts stop on this sample").
- **Risk** (``risk_eval.py``): its ``raw`` mode replaces every prediction with a coin flip
  (``random.random() < 0.5``) and its other mode asks GPT-4o-mini, so neither can be reproduced; this protocol
  reads the prediction's ``Risk`` text with the script's rule ('yes' in it -> Yes, else 'no' -> No, else 'risk'
  -> Yes, else No) over the window's samples that have a prediction, scored with balanced accuracy and F1.
- **Action** (``action_eval.py``, raw mode): the window's samples with a ground-truth action (not empty, not
  "N/A") and a non-empty predicted ``Suggested_action``; BERTScore F1 with ``--bertscore-model``, else the
  stand-ins of the paper protocol (exact vocabulary accuracy, token F1) over those pairs.

A prediction in App. A.2's form (``Pedestrians: {id: {"Box": ...}}``) has no ``Bounding_box``: the scripts find
no box in it, and neither does this protocol (named in ``problems``); the paper protocol reads both forms.
"""
from __future__ import annotations

from itertools import islice

SCRIPTS_OD_IOU = 0.25
SCRIPTS_MATCH_IOU = 0.6
SCRIPTS_IMAGE_SHAPE = (1520, 2704)  # their ``image_dimensions``: x (even index) -> 1520, y (odd index) -> 2704
_GROUPS = (("Pedestrians", ("pedestrian", "person")), ("Cyclists", ("cyclist",)))


class _StopSample(Exception):
    """Where the public scripts raise inside a sample (caught by their bare ``except``: the sample's remaining
    objects are not counted)."""


def _iou(a, b) -> float:
    """The scripts' ``calculate_iou``: 0 for boxes that are not 4 values, that only touch, or an empty union."""
    if len(a) != 4 or len(b) != 4:
        return 0.0
    try:
        xl, yt, xr, yb = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
        if xr < xl or yb < yt:
            return 0.0
        inter = (xr - xl) * (yb - yt)
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    except TypeError as err:  # a list where a number belongs (four boxes in a list)
        raise _StopSample(str(err)) from None
    return inter / union if union > 0 else 0.0


def _rescale(box: list) -> list:
    out = []
    for i, v in enumerate(box):
        try:
            small = 0 < v < 1
        except TypeError as err:
            raise _StopSample(str(err)) from None
        out.append(v * SCRIPTS_IMAGE_SHAPE[i % 2] if small else v)
    return out


def _predicted_box(det, cyclist_intent: bool):
    """The box the scripts read from one prediction object, None when they skip it; ``cyclist_intent``: their
    cyclist branch of ``evaluate_intents`` rescales before its checks."""
    try:
        has = "Bounding_box" in det or "bounding_box" in det
    except TypeError:  # not a container: the scripts' ``in`` raises
        raise _StopSample("a prediction object that is not an object") from None
    if not has:
        return None
    try:
        raw = det["Bounding_box"]
        box = raw[0] if len(raw) == 1 else raw
    except (KeyError, TypeError, IndexError) as err:
        raise _StopSample(f"Bounding_box: {err!r}") from None
    if cyclist_intent:
        if isinstance(box, (int, float)) or box is None:
            raise _StopSample("a box that is a number")
        box = _rescale(list(box))
    if not box or isinstance(box, int):
        return None
    if isinstance(box, dict):
        box = list(box.values())
    if isinstance(box, list) and box and isinstance(box[0], list):
        return box  # a list of boxes: scored as one "box", which ``_iou`` turns into 0 or a stop
    try:
        box = [0.0 if v is None else float(v) for v in box]
    except (TypeError, ValueError) as err:
        raise _StopSample(f"a coordinate that is no number: {err}") from None
    return _rescale(box)


def _best(gt_box, pred_sample, keys, cyclist_intent=False):
    """(best IoU, its prediction object or None) over ``pred_sample``'s keys containing one of ``keys``."""
    best, match = 0.0, None
    try:
        items = list(pred_sample.items())
    except AttributeError:
        raise _StopSample("a prediction sample that is not an object") from None
    for name, det in items:
        if not any(k in str(name).lower() for k in keys):
            continue
        box = _predicted_box(det, cyclist_intent)
        if box is None:
            continue
        iou = _iou(gt_box, box)
        if iou > best:
            best, match = iou, det
    return best, match


def window(gt: dict, pred: dict) -> list[tuple[str, dict]]:
    """The ground-truth samples the scripts score: the first ``len(pred)`` in the ground truth's order."""
    return list(islice(gt.items(), len(pred)))


def detection(win, pred: dict, iou_threshold: float, stopped: set) -> tuple[int, int]:
    """(objects counted, objects detected) by ``evaluate_bounding_boxes``'s rules (module doc)."""
    total = correct = 0
    for sid, g in win:
        if sid not in pred:
            continue
        p = pred[sid]
        try:
            for group, keys in _GROUPS:
                for obj in (g.get(group) or {}).values():
                    total += 1
                    if group == "Pedestrians" and isinstance(p, list):
                        p = p[0] if p else p
                    best, match = _best(obj["Box"], p, keys)
                    if match and best >= iou_threshold:
                        correct += 1
        except _StopSample:
            stopped.add(sid)
    return total, correct


def intents(win, pred: dict, iou_threshold: float, stopped: set) -> dict:
    """Counts of ``evaluate_intents`` (module doc): lateral / vertical totals and right answers."""
    c = {"lateral": 0, "vertical": 0, "lateral_right": 0, "vertical_right": 0, "intents": 0, "right": 0}
    for sid, g in win:
        try:
            for group, keys in _GROUPS:
                for obj in (g.get(group) or {}).values():
                    gi = obj.get("Intent")
                    if not gi or not isinstance(gi, list):
                        continue
                    c["lateral"] += 1
                    c["vertical"] += len(gi) > 1
                    c["intents"] += len(gi)
                    if sid not in pred:
                        continue
                    best, match = _best(obj["Box"], pred[sid], keys, cyclist_intent=group == "Cyclists")
                    if not (match and best >= iou_threshold):
                        continue
                    try:
                        pi = match.get("Intent", [])
                    except AttributeError:
                        raise _StopSample("a matched object that is not an object") from None
                    if isinstance(pi, str):
                        pi = [pi, pi]
                    try:
                        for k, name in ((0, "lateral_right"), (1, "vertical_right")):
                            if len(gi) > k and len(pi) > k and gi[k] == pi[k]:
                                c[name] += 1
                                c["right"] += 1
                    except (TypeError, KeyError) as err:
                        raise _StopSample(f"Intent: {err!r}") from None
        except _StopSample:
            stopped.add(sid)
    return c


def risk_label(text) -> str | None:
    """The Yes/No the risk script reads from a prediction's text (module doc); None for no text."""
    if not isinstance(text, str) or not text:
        return None
    low = text.lower()
    if "yes" in low:
        return "Yes"
    if "no" in low:
        return "No"
    return "Yes" if "risk" in low else "No"
