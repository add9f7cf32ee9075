"""Small columnar helpers shared by attributes, labels and QA: Arrow <-> numpy, dense keys, group bounds.

Everything here is vectorised over rows; nothing loops in Python per row.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def column(table: pa.Table, name: str) -> pa.Array:
    """One column as a single contiguous Array (chunks combined)."""
    col = table.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def fixed_list_to_numpy(arr: pa.Array | pa.ChunkedArray, width: int) -> np.ndarray:
    """A fixed-size (or regular variable) list<float> column -> (N, width) float64; null lists become NaN rows."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr)
    if n == 0:
        return np.zeros((0, width), dtype=np.float64)
    if pa.types.is_fixed_size_list(arr.type):
        values = arr.values.slice(arr.offset * width, n * width)
    else:  # variable lists of the right length
        lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
        if np.any((lengths != width) & ~np.isnan(lengths.astype(float))):
            raise ValueError(f"expected lists of {width} values")
        values = pc.list_flatten(pc.fill_null(arr, pa.scalar([np.nan] * width, arr.type)))
    out = values.to_numpy(zero_copy_only=False).astype(np.float64, copy=True).reshape(n, width)
    if arr.null_count:
        out[arr.is_null().to_numpy(zero_copy_only=False)] = np.nan
    return out


def numpy_to_fixed_list(values: np.ndarray, width: int, value_type: pa.DataType = pa.float64()) -> pa.Array:
    """(N, width) array -> fixed_size_list<value_type, width> Arrow array (no per-row Python)."""
    v = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
    return pa.FixedSizeListArray.from_arrays(pa.array(v, type=value_type), width)


def to_numpy(arr, dtype=None, fill=None) -> np.ndarray:
    """Arrow array/column -> numpy; nulls replaced by ``fill`` when given."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if fill is not None and arr.null_count:
        arr = pc.fill_null(arr, fill)
    out = arr.to_numpy(zero_copy_only=False)
    return out if dtype is None else out.astype(dtype, copy=False)


def codes(values: pa.Array, universe: pa.Array) -> np.ndarray:
    """Index of each of ``values`` (strings) in ``universe``; -1 when absent."""
    idx = pc.index_in(values, value_set=universe)
    return to_numpy(idx, np.int64, fill=-1)


def unique_strings(*arrays) -> pa.Array:
    """Sorted unique strings over several Arrow string arrays/columns."""
    parts = []
    for a in arrays:
        if isinstance(a, pa.ChunkedArray):
            parts.extend(a.chunks)
        else:
            parts.append(a)
    parts = [p.cast(pa.string()) for p in parts if len(p)]
    if not parts:
        return pa.array([], pa.string())
    u = pc.unique(pa.chunked_array(parts, type=pa.string()))
    return pc.take(u, pc.sort_indices(u))


def dense_codes(x: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense codes (0..M-1) of integers in value order; returns (codes, M). Integers spanning a range not much
    wider than their count (scene codes, track ids, frame keys) are ranked through a presence table, O(n + range),
    without sorting; others by ``np.unique``."""
    x = np.asarray(x, np.int64)
    if len(x) == 0:
        return np.zeros(0, dtype=np.int64), 0
    lo = int(x.min())
    span = int(x.max()) - lo + 1
    if span <= max(4096, 4 * len(x)):
        present = np.zeros(span, bool)
        present[x - lo] = True
        rank = np.cumsum(present) - 1
        return rank[x - lo], int(rank[-1]) + 1
    u, inv = np.unique(x, return_inverse=True)
    return inv.reshape(-1).astype(np.int64), len(u)


def dense_pair_codes(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense codes (0..M-1) of integer pairs (a, b), ordered lexicographically; returns (codes, M).
    Two 1-D ``dense_codes`` passes (b's values first, then the combined small key) - no row-wise sort."""
    if len(a) == 0:
        return np.zeros(0, dtype=np.int64), 0
    a = np.asarray(a, np.int64)
    inv_b, n_b = dense_codes(b)
    key = (a - a.min()) * n_b + inv_b
    return dense_codes(key)


class KeyIndex:
    """Lookup of unique int64 keys -> ``values`` (default: the key's position). ``find`` returns -1 for
    missing keys."""

    def __init__(self, keys: np.ndarray, values: np.ndarray | None = None):
        keys = np.asarray(keys, dtype=np.int64)
        order = np.argsort(keys, kind="stable")
        self.sorted = keys[order]
        self.order = order if values is None else np.asarray(values, dtype=np.int64)[order]
        if len(self.sorted) > 1 and np.any(self.sorted[1:] == self.sorted[:-1]):
            dup = self.sorted[1:][self.sorted[1:] == self.sorted[:-1]][0]
            raise ValueError(f"duplicate key {dup} in lookup table")

    def find(self, queries: np.ndarray) -> np.ndarray:
        q = np.asarray(queries, dtype=np.int64)
        if len(self.sorted) == 0:
            return np.full(q.shape, -1, dtype=np.int64)
        pos = np.searchsorted(self.sorted, q)
        pos_c = np.minimum(pos, len(self.sorted) - 1)
        hit = self.sorted[pos_c] == q
        return np.where(hit, self.order[pos_c], -1)


def group_starts(sorted_keys: np.ndarray) -> np.ndarray:
    """Boolean (N,) marking the first row of each run of equal keys in a sorted key array."""
    k = np.asarray(sorted_keys)
    first = np.ones(len(k), dtype=bool)
    if len(k) > 1:
        first[1:] = k[1:] != k[:-1]
    return first


def rank_in_group(sorted_keys: np.ndarray) -> np.ndarray:
    """0-based position of each row within its run of equal keys (keys sorted)."""
    n = len(sorted_keys)
    first = group_starts(sorted_keys)
    start_pos = np.maximum.accumulate(np.where(first, np.arange(n), 0)) if n else np.zeros(0, np.int64)
    return np.arange(n) - start_pos


def neighbour_in_group(group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For rows sorted by (group, time): index of the previous/next row of the same group (self at the ends)."""
    n = len(group)
    idx = np.arange(n)
    prev = idx - 1
    nxt = idx + 1
    if n:
        prev[0] = 0
        nxt[-1] = n - 1
        same_prev = np.ones(n, dtype=bool)
        same_prev[1:] = group[1:] == group[:-1]
        same_prev[0] = False
        same_next = np.ones(n, dtype=bool)
        same_next[:-1] = group[:-1] == group[1:]
        same_next[-1] = False
        prev = np.where(same_prev, prev, idx)
        nxt = np.where(same_next, nxt, idx)
    return prev, nxt


def central_difference(group: np.ndarray, t_s: np.ndarray, values: np.ndarray) -> np.ndarray:
    """d(values)/dt per group for rows sorted by (group, t): central differences inside a group, one-sided
    at its ends, NaN for a group of one row. values (N, D) -> (N, D)."""
    prev, nxt = neighbour_in_group(group)
    dt = t_s[nxt] - t_s[prev]
    with np.errstate(invalid="ignore", divide="ignore"):
        d = (values[nxt] - values[prev]) / dt[:, None]
    d[dt <= 0] = np.nan
    return d


def ranges_to_indices(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenate index ranges [start, start+len) without a Python loop."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offs = np.cumsum(lengths) - lengths
    nz = lengths > 0
    return np.arange(total, dtype=np.int64) + np.repeat(starts[nz] - offs[nz], lengths[nz])
