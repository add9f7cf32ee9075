"""Track identity check of a run's objects against the source's own identities (``instance_token``), for every
class and at any range (the devkit's tracking metrics cover only its tracking classes within their range).

Where the detection backend carries the logs' identities (``labels``: each box keeps its annotation's
``instance_token``; a coasted box has none), a track should carry exactly one identity:

* **merged track**: a track whose boxes carry two or more identities (two objects became one track);
* **foreign box**: a box whose identity is not its track's own (the identity most of the track's boxes carry;
  a tie goes to the first in token order): how much of a merged track is another object's, from one swapped
  box to half the track;
* **bridge box**: a box without identity lying, within its track, between boxes of two different identities
  (boxes the tracker invented to join them, which then give the first object a path it never drove);
* **split identity**: an identity spread over two or more tracks (the object's track was broken).

Pure: ``track_identity(objects) -> dict``; ``generator.validate.run`` adds it to the report as
``track_identity``. Runs whose objects carry no identity (a perception detector) get ``None``.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from generator.attributes.arrays import codes, column, dense_pair_codes, to_numpy, unique_strings


def track_identity(objects: pa.Table) -> dict | None:
    """Per class and in all: tracks, identities, merged tracks, foreign boxes, bridge boxes, split identities (see
    the module docstring); None when no box carries an identity."""
    tok = pc.fill_null(column(objects, "instance_token"), "")
    has = to_numpy(pc.not_equal(tok, ""), bool, fill=False)
    tracked = to_numpy(column(objects, "track_id"), np.int64) >= 0
    if not (has & tracked).any():
        return None
    keep = np.flatnonzero(tracked)
    sc = codes(column(objects, "scene_id"), unique_strings(objects.column("scene_id")))[keep]
    tr = to_numpy(column(objects, "track_id"), np.int64)[keep]
    fi = to_numpy(column(objects, "frame_index"), np.int64)[keep]
    cls_names = unique_strings(objects.column("class_name"))
    cls = codes(column(objects, "class_name"), cls_names)[keep]
    tok_k = pc.take(tok, pa.array(keep))
    has_k = has[keep]
    ident = np.where(has_k, codes(tok_k, unique_strings(tok_k)), -1)
    track, n_tracks = dense_pair_codes(sc, tr)
    # one identity per (scene, token): the same token in two scenes is two objects
    id_code, _ = dense_pair_codes(sc, np.where(has_k, ident, -1))
    id_code = np.where(has_k, id_code, -1)

    # merged tracks: distinct identities per track
    pairs, pair_boxes = np.unique(np.stack([track[has_k], id_code[has_k]], axis=1), axis=0, return_counts=True)
    ids_per_track = np.bincount(pairs[:, 0], minlength=n_tracks)
    merged = ids_per_track >= 2
    # foreign boxes: identified boxes other than their track's own identity (its most frequent; pairs come
    # sorted by track then identity, the stable sort keeps the first identity of a tie)
    by_count = np.lexsort((-pair_boxes, pairs[:, 0]))
    lead = by_count[np.r_[True, pairs[by_count[1:], 0] != pairs[by_count[:-1], 0]]]  # (an identified box exists)
    own = np.full(n_tracks, -1)
    own[pairs[lead, 0]] = pairs[lead, 1]
    foreign = has_k & (id_code != own[track])
    # split identities: distinct tracks per identity
    per_id = np.bincount(pairs[:, 1], minlength=int(id_code.max()) + 1 if len(pairs) else 0)
    split_ids = np.flatnonzero(per_id >= 2)
    # bridge boxes: an empty identity whose track's previous and next identified boxes differ (boxes sorted by
    # track then frame; a running max / min of the identified positions, kept only within the box's own track)
    o = np.lexsort((fi, track))
    t_o, id_o = track[o], id_code[o]
    n, pos = len(o), np.arange(len(o))
    first = np.r_[True, t_o[1:] != t_o[:-1]]
    last = np.r_[t_o[1:] != t_o[:-1], True]
    start = np.maximum.accumulate(np.where(first, pos, 0))
    end = np.minimum.accumulate(np.where(last, pos, n)[::-1])[::-1]
    prev_idx = np.maximum.accumulate(np.where(id_o >= 0, pos, -1))
    next_idx = np.minimum.accumulate(np.where(id_o >= 0, pos, n)[::-1])[::-1]
    prev_id = np.where(prev_idx >= start, id_o[np.clip(prev_idx, 0, max(n - 1, 0))], -1)
    next_id = np.where(next_idx <= end, id_o[np.clip(next_idx, 0, max(n - 1, 0))], -1)
    bridge_o = (id_o < 0) & (prev_id >= 0) & (next_id >= 0) & (prev_id != next_id)
    bridge = np.zeros(len(o), bool)
    bridge[o] = bridge_o

    track_cls = np.zeros(n_tracks, np.int64)
    track_cls[track] = cls
    id_cls = np.zeros(len(per_id), np.int64)
    id_cls[id_code[has_k]] = cls[has_k]
    names = cls_names.to_pylist()

    def figures(sel_track, sel_box, sel_id) -> dict:
        return {"tracks": int(sel_track.sum()), "identities": int(sel_id[per_id > 0].sum()),
                "merged_tracks": int((merged & sel_track).sum()), "foreign_boxes": int((foreign & sel_box).sum()),
                "bridge_boxes": int((bridge & sel_box).sum()),
                "split_identities": int(sel_id[split_ids].sum()) if len(split_ids) else 0}

    all_t, all_b, all_i = np.ones(n_tracks, bool), np.ones(len(keep), bool), np.ones(len(per_id), bool)
    out = {"all": figures(all_t, all_b, all_i), "per_class": {}}
    for c, name in enumerate(names):
        if (cls == c).any():
            out["per_class"][name] = figures(track_cls == c, cls == c, id_cls == c)
    return out
