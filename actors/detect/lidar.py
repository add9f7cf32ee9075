"""``lidar`` backend: a weight-free, geometric LiDAR object detector.

Pure core ``detect_points(points_ego (N, >=3), cfg) -> Boxes3D`` (ego frame):

1. crop: finite points within ``max_range_m`` (BEV), below ``max_height_m`` above the ground, outside the
   ego vehicle's own footprint (``ego_half_length_m`` x ``ego_half_width_m``);
2. ground removal: a seeded numpy RANSAC plane (``fit_ground_plane``) fitted to the points near the vehicle,
   refined per ``ground_cell_m`` BEV cell (the cell's lowest point, when it lies within
   ``ground_cell_tolerance_m`` of the plane, becomes the cell's ground height: slopes and kerbs);
   points less than ``ground_distance_m`` above their ground height are ground;
3. clustering: DBSCAN (open3d ``cluster_dbscan``) on the voxel-downsampled obstacle points in BEV
   (z flattened, so a car's roof and sides stay one object), ``cluster_eps_m`` / ``cluster_min_points``;
4. box fitting per cluster: L-shape rectangle fit in BEV (``fit_rectangle``; a minimum-area rectangle is
   ambiguous for L-shaped views); height from the ground to the highest point;
5. classification by shape (footprint, height) against nuScenes class sizes; clusters that fit no class
   (walls, vegetation, poles) are dropped. Vehicles seen from one side are completed to the class's
   typical size by growing the box *away* from the sensor (the unseen half lies behind the visible face);
6. score: how well the cluster fits its class (size agreement) times how densely it is observed
   (saturating in the number of points).

It reports no velocity (NaN; the tracker fills it from the track).
"""
from __future__ import annotations

import hashlib

import numpy as np

from actors.detect.base import Detector
from actors.detect.priors import SIZE_PRIORS_LWH_M
from generator.types import Boxes3D, Frame
from schemas.config import LidarDetectorConfig

# Shape rules: (class, footprint long side, short side, height) ranges in metres; the first match wins.
# "face" rules catch vehicles seen from the front or back only (a ~2 m wide, thin, tall cluster).
_SHAPE_RULES = (
    ("bus", (8.0, 14.0), (2.0, 3.8), (2.6, 4.5)),
    ("truck", (4.5, 12.0), (1.6, 3.8), (2.2, 4.5)),
    ("truck", (2.0, 3.3), (0.0, 1.2), (2.3, 4.5)),  # face
    ("car", (2.6, 6.2), (0.0, 2.6), (1.0, 2.3)),
    ("bicycle", (1.1, 2.0), (0.25, 0.8), (0.9, 1.9)),
    ("car", (1.4, 2.6), (0.0, 2.6), (1.2, 2.3)),  # face
    ("pedestrian", (0.0, 1.1), (0.0, 1.0), (1.0, 2.2)),
    ("traffic_cone", (0.0, 0.7), (0.0, 0.7), (0.3, 1.0)),
    ("barrier", (1.0, 4.0), (0.0, 0.9), (0.5, 1.3)),
)
_VEHICLES = ("car", "truck", "bus")


def _grid_key(cells: np.ndarray) -> np.ndarray:
    """One int64 key per row of integer grid coordinates (N, k), ordered like the rows lexicographically:
    ``np.unique`` on it groups and orders exactly as ``np.unique(cells, axis=0)``, ~20x faster."""
    lo = cells.min(axis=0)
    span = cells.max(axis=0) - lo + 1
    if np.prod(span.astype(np.float64)) >= 2.0 ** 62:  # absurd extents: keep the exact row-wise path
        return np.unique(cells, axis=0, return_inverse=True)[1].reshape(-1)
    key = np.zeros(len(cells), dtype=np.int64)
    for j in range(cells.shape[1]):
        key = key * span[j] + (cells[:, j] - lo[j])
    return key


def _sweep_rng(points: np.ndarray, seed: int) -> np.random.Generator:
    """A generator seeded from ``seed`` and a hash of the points' bytes: the same sweep always draws the same
    hypotheses, in any process and on any thread count, and different sweeps draw independent ones."""
    digest = hashlib.blake2b(np.ascontiguousarray(points, dtype=np.float64).tobytes(), digest_size=8).digest()
    return np.random.default_rng([seed, int.from_bytes(digest, "little")])


def _plane_distance(points: np.ndarray, normal: np.ndarray, d) -> np.ndarray:
    """Signed distances (N, H) of points (N, 3) to H planes ``normal`` (H, 3) . p + ``d`` (H,) = 0.
    Element-wise products and sums (no BLAS): the same bits on every thread count."""
    r = points[:, :1] * normal[:, 0]
    r += points[:, 1:2] * normal[:, 1]
    r += points[:, 2:3] * normal[:, 2]
    r += d
    return r


def fit_ground_plane(points: np.ndarray, cfg: LidarDetectorConfig) -> tuple[np.ndarray, float]:
    """Ground plane ``normal . p + d = 0`` (unit normal (3,) pointing up, d) of a sweep's points (N, 3), ego frame.

    Seeded, vectorised RANSAC (deterministic; Open3D's ``segment_plane`` draws its samples from OpenMP
    threads in a racy order, so its plane changed from run to run): candidates are the points within 30 m
    (and ``max_range_m``) below the 60th height percentile; ``ground_ransac_iterations`` planes through 3
    random candidates are scored at once on ``ground_ransac_points`` of them (MSAC: squared distance
    truncated at ``ground_distance_m``), planes tilted more than ``ground_max_tilt_deg`` (walls) and
    degenerate triples are rejected, and the best one (first on ties) is refined by least squares on all its
    candidate inliers. The generator is seeded by ``ransac_seed`` and a hash of the candidates.
    Falls back to a horizontal plane at the 5th height percentile when no hypothesis is ground-like."""
    z = points[:, 2]
    horizontal = (np.array([0.0, 0.0, 1.0]), -float(np.percentile(z, 5)) if len(z) else 0.0)
    near = np.hypot(points[:, 0], points[:, 1]) < min(cfg.max_range_m, 30.0)
    low = z < np.percentile(z, 60) if len(z) else near
    cand = np.ascontiguousarray(points[near & low] if (near & low).sum() >= 50 else points, dtype=np.float64)
    if len(cand) < 3:
        return horizontal
    rng = _sweep_rng(cand, cfg.ransac_seed)
    score_pts = cand if len(cand) <= cfg.ground_ransac_points else cand[
        np.sort(rng.choice(len(cand), cfg.ground_ransac_points, replace=False))]
    tri = score_pts[rng.integers(0, len(score_pts), (cfg.ground_ransac_iterations, 3))]  # (H, 3 points, 3)
    normal = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    norm = np.linalg.norm(normal, axis=1)
    ok = norm > 1e-9
    normal[ok] /= np.where(normal[ok, 2:3] < 0, -norm[ok, None], norm[ok, None])  # unit, pointing up
    ok &= normal[:, 2] >= np.cos(np.deg2rad(cfg.ground_max_tilt_deg))
    if not ok.any():
        return horizontal
    normal = normal[ok]
    d = -np.sum(normal * tri[ok, 0], axis=1)
    # MSAC cost (truncated squared distance; Torr & Zisserman 2000): unlike an inlier count it prefers the
    # plane through the middle of the road's points to one shifted up to also catch kerbs and wall bottoms.
    # float32: the (ground_ransac_points, H) scoring is memory-bound; centimetres need no more digits.
    r = _plane_distance(score_pts.astype(np.float32), normal.astype(np.float32), d.astype(np.float32))
    r *= r
    cost = np.minimum(r, np.float32(cfg.ground_distance_m ** 2), out=r).sum(axis=0)
    best = int(np.argmin(cost))
    n, d = normal[best], float(d[best])
    # Least-squares refinement on the best hypothesis' inliers among all candidates: the normal is the
    # covariance's smallest eigenvector (products and sums written out: no threaded BLAS reduction).
    inl = cand[np.abs(_plane_distance(cand, n[None], d)[:, 0]) < cfg.ground_distance_m]
    if len(inl) >= 3:
        q = inl - inl.mean(axis=0)
        cov = np.array([[np.sum(q[:, i] * q[:, j]) for j in range(3)] for i in range(3)])
        m = np.linalg.eigh(cov)[1][:, 0]
        m = -m if m[2] < 0 else m
        if m[2] >= np.cos(np.deg2rad(cfg.ground_max_tilt_deg)):
            n, d = m, -float(np.sum(m * inl.mean(axis=0)))
    return n, d


def remove_ground(points: np.ndarray, cfg: LidarDetectorConfig) -> tuple[np.ndarray, np.ndarray]:
    """points (N, 3) ego frame -> (is_ground (N,) bool, ground_z (N,) ground height under each point)."""
    n = len(points)
    if n < 3:
        return np.ones(n, dtype=bool), np.zeros(n)
    (a, b, c), d = fit_ground_plane(points, cfg)
    plane_z = -(a * points[:, 0] + b * points[:, 1] + d) / c
    # Per-cell refinement: the lowest point of a cell is its ground when it lies near the plane.
    cell = np.floor(points[:, :2] / cfg.ground_cell_m).astype(np.int64)
    _, inv = np.unique(_grid_key(cell), return_inverse=True)
    cell_min = np.full(inv.max() + 1, np.inf)
    np.minimum.at(cell_min, inv, points[:, 2])
    lowest = cell_min[inv]
    ground_z = np.where(np.abs(lowest - plane_z) <= cfg.ground_cell_tolerance_m, lowest, plane_z)
    return points[:, 2] - ground_z < cfg.ground_distance_m, ground_z


def cluster_points(xy: np.ndarray, cfg: LidarDetectorConfig) -> np.ndarray:
    """DBSCAN labels (N,) (-1 = noise) of BEV points (N, 2) via open3d. Deterministic on any thread count
    (its threads only fill each point's own neighbour list; labels are expanded sequentially in point order),
    which ``tests/test_detect_determinism.py`` checks across processes."""
    import open3d as o3d

    if len(xy) == 0:
        return np.zeros(0, dtype=np.int64)
    pts = np.column_stack([xy, np.zeros(len(xy))])
    pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(pts))
    return np.asarray(pcd.cluster_dbscan(eps=cfg.cluster_eps_m, min_points=cfg.cluster_min_points))


def classify(long_m: np.ndarray, short_m: np.ndarray, height_m: np.ndarray, height_tol_m=0.0) -> np.ndarray:
    """Class name per cluster (object array, '' = no class) from its footprint and height (``_SHAPE_RULES``).

    ``height_tol_m`` (per cluster): how much of the object's top the scan pattern may have missed (the
    gap between two beams at the cluster's range); it relaxes the lower height bounds only."""
    conds = [(long_m >= l0) & (long_m <= l1) & (short_m >= s0) & (short_m <= s1) & (height_m + height_tol_m >= h0)
             & (height_m <= h1) for _, (l0, l1), (s0, s1), (h0, h1) in _SHAPE_RULES]
    return np.select(conds, [name for name, *_ in _SHAPE_RULES], default="").astype(object)


def fit_rectangle(xy: np.ndarray, step_deg: float = 1.0, d0_m: float = 0.05) -> tuple[np.ndarray, np.ndarray, float]:
    """Oriented BEV rectangle of a cluster's points (n, 2) by L-shape fitting with the closeness criterion
    (Zhang et al., "Efficient L-shape fitting for vehicle detection using laser scanners", IV 2017): among
    headings in [0, 90) deg, pick the one whose bounding rectangle has the points closest to its edges.
    A minimum-area rectangle is ambiguous for the L-shaped views of vehicles (a right triangle's hull has
    two minimal rectangles), this criterion is not. Returns (centre (2,), extents (2,) along the heading
    and across it, heading rad)."""
    th = np.deg2rad(np.arange(0.0, 90.0, step_deg))
    c, s = np.cos(th), np.sin(th)
    a = xy[:, :1] * c + xy[:, 1:2] * s  # (n, K) coordinate along each candidate heading
    b = -xy[:, :1] * s + xy[:, 1:2] * c
    amin, amax, bmin, bmax = a.min(0), a.max(0), b.min(0), b.max(0)
    da = np.minimum(a - amin, amax - a)
    db = np.minimum(b - bmin, bmax - b)
    score = (1.0 / np.maximum(np.minimum(da, db), d0_m)).sum(0)
    k = int(np.argmax(score))
    ca, cb = (amin[k] + amax[k]) / 2, (bmin[k] + bmax[k]) / 2
    centre = np.array([ca * c[k] - cb * s[k], ca * s[k] + cb * c[k]])
    return centre, np.array([amax[k] - amin[k], bmax[k] - bmin[k]]), float(th[k])


def fit_boxes(points: np.ndarray, labels: np.ndarray, ground_z: np.ndarray, cfg: LidarDetectorConfig) -> Boxes3D:
    """Boxes for the clusters ``labels`` (N,) of obstacle points (N, 3) with ground heights (N,)."""
    ok = labels >= 0
    if not ok.any():
        return Boxes3D.empty()
    lab, pts, gz = labels[ok], points[ok], ground_z[ok]
    order = np.argsort(lab, kind="stable")
    lab, pts, gz = lab[order], pts[order], gz[order]
    uniq, start, count = np.unique(lab, return_index=True, return_counts=True)
    keep = count >= cfg.min_box_points
    start, count = start[keep], count[keep]
    if not len(start):
        return Boxes3D.empty()
    rng = np.random.default_rng(0)
    ctr, ext, ang = [], [], []
    for s, c in zip(start, count):  # one fit per cluster (tens per sweep); large clusters subsampled
        xy = pts[s:s + c, :2]
        if c > 400:
            xy = xy[rng.choice(c, 400, replace=False)]
        ce, ex, th = fit_rectangle(xy)
        ctr.append(ce)
        ext.append(ex)
        ang.append(th)
    ctr, ext, ang = np.array(ctr), np.array(ext), np.array(ang)
    long_is_a = ext[:, 0] >= ext[:, 1]
    long_m = ext.max(axis=1)
    short_m = ext.min(axis=1)
    yaw = np.where(long_is_a, ang, ang + np.pi / 2)
    top = np.maximum.reduceat(pts[:, 2], start)
    bottom = np.minimum.reduceat(gz, start)
    height = top - bottom
    tol = np.linalg.norm(ctr, axis=1) * np.tan(np.deg2rad(cfg.beam_spacing_deg))
    cls = classify(long_m, short_m, height, tol)
    # A vehicle seen only from its front or back shows a thin face: its length runs across the face.
    face = (((cls == "car") & (long_m <= 2.6)) | ((cls == "truck") & (long_m <= 3.3))) & (short_m < 1.2)
    yaw = np.where(face, yaw + np.pi / 2, yaw)
    length = np.where(face, short_m, long_m)
    width = np.where(face, long_m, short_m)
    # Complete vehicles to their class's typical size, growing away from the sensor.
    prior = np.array([SIZE_PRIORS_LWH_M.get(c, (0, 0, 0)) for c in cls]).reshape(-1, 3)
    veh = np.isin(cls, _VEHICLES)
    axis_l = np.stack([np.cos(yaw), np.sin(yaw)], axis=1)
    axis_w = np.stack([-np.sin(yaw), np.cos(yaw)], axis=1)
    new_l = np.where(veh, np.maximum(length, prior[:, 0]), length)
    new_w = np.where(veh, np.maximum(width, prior[:, 1]), width)
    height = np.where(veh, np.maximum(height, np.minimum(prior[:, 2], height + tol)), height)
    away_l = np.sign(np.sum(ctr * axis_l, axis=1))
    away_w = np.sign(np.sum(ctr * axis_w, axis=1))
    ctr = ctr + axis_l * (away_l * (new_l - length) / 2)[:, None] + axis_w * (away_w * (new_w - width) / 2)[:, None]
    # Score: size agreement with the class prior times observation density.
    with np.errstate(divide="ignore", invalid="ignore"):
        fit = np.prod(np.minimum(np.stack([new_l, new_w, height], 1), prior) /
                      np.maximum(np.stack([new_l, new_w, height], 1), prior), axis=1)
    density = 1.0 - np.exp(-count / 30.0)
    score = np.nan_to_num(0.3 + 0.7 * np.sqrt(fit) * density)
    valid = cls != ""
    center = np.column_stack([ctr, bottom + height / 2])
    boxes = Boxes3D(center[valid], np.column_stack([new_l, new_w, height])[valid], np.arctan2(np.sin(yaw), np.cos(yaw))[valid],
                    cls[valid], score=np.clip(score[valid], 0, 1), num_lidar_pts=count[valid])
    return boxes


def detect_points(points_ego: np.ndarray, cfg: LidarDetectorConfig) -> Boxes3D:
    """Pure core: (N, >=3) ego-frame LiDAR points -> Boxes3D (ego frame, no velocity)."""
    p = np.asarray(points_ego, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] < 3:
        raise ValueError(f"points must be (N, >=3), got {p.shape}")
    p = p[np.isfinite(p[:, :3]).all(axis=1), :3]
    r = np.linalg.norm(p[:, :2], axis=1)
    ego = (np.abs(p[:, 0]) <= cfg.ego_half_length_m) & (np.abs(p[:, 1]) <= cfg.ego_half_width_m)
    p = p[(r <= cfg.max_range_m) & ~ego]
    if len(p) < cfg.min_box_points:
        return Boxes3D.empty()
    ground, gz = remove_ground(p, cfg)
    obst = ~ground & (p[:, 2] - gz <= cfg.max_height_m)
    p, gz = p[obst], gz[obst]
    if len(p) < cfg.min_box_points:
        return Boxes3D.empty()
    # Voxel-downsample for clustering speed; every original point inherits its voxel's cluster.
    if cfg.voxel_size_m > 0:
        vox = np.floor(p / cfg.voxel_size_m).astype(np.int64)
        _, first, inv = np.unique(_grid_key(vox), return_index=True, return_inverse=True)
        lab = cluster_points(p[first, :2], cfg)[inv]
    else:
        lab = cluster_points(p[:, :2], cfg)
    return fit_boxes(p, lab, gz, cfg)


class LidarDetector(Detector):
    name = "lidar"

    def __call__(self, frames: list[Frame]) -> list[Boxes3D]:
        from generator.sources import io

        return [self._postfilter(detect_points(io.load_lidar_ego(fr), self.cfg.lidar)) for fr in frames]
