"""``lidar`` backend: a weight-free, geometric LiDAR object detector.

Pure core ``detect_points(points_ego (N, >=3), cfg, earlier_ego=None, lag_s=0) -> Boxes3D`` (ego frame):

1. crop: finite points within ``max_range_m`` (BEV), outside the ego vehicle's own footprint
   (``ego_half_length_m`` x ``ego_half_width_m``);
2. ground removal: a seeded numpy RANSAC plane (``fit_ground_plane``) fitted to the points near the vehicle,
   refined per ``ground_cell_m`` BEV cell (the cell's lowest point, when it lies within
   ``ground_cell_tolerance_m`` of the plane, becomes the cell's ground height: slopes and kerbs);
   points less than ``ground_distance_m`` above their ground height are ground; obstacle points are those
   up to ``max_height_m`` above it (the ones above are kept aside for the structure test);
3. clustering: DBSCAN (open3d ``cluster_dbscan``) on the voxel-downsampled obstacle points in BEV
   (z flattened, so a car's roof and sides stay one object), ``cluster_eps_m`` / ``cluster_min_points``;
4. cluster geometry (``cluster_geometry``): L-shape rectangle fit in BEV (``fit_rectangle``; a minimum-area
   rectangle is ambiguous for L-shaped views), height from the ground to the ``height_quantile`` of its
   points (a thin pole or branch merged into a car's cluster is not its top), the points above the height
   crop over its footprint;
5. motion (``cluster_motion``, ``actors.detect.motion``), when an earlier sweep is given: the displacement
   that best lines the cluster up with the earlier sweep's obstacle points; moving clusters get a velocity
   (ego frame, m/s), still or unseen ones NaN;
6. structure test: a cluster taller than ``structure_height_m``, or reaching near the height crop with
   points above it, is part of a building, wall, pole or sign, not a road user; a small one whose lowest
   point floats above the ground (``floating_m`` beyond a beam gap) is a sign or a branch;
7. classification (``classify``) by footprint and height against ``shape_rules`` (nuScenes class sizes,
   seen from the side or only from the front/back); motion tells the two apart (a car's face crossing the
   view is a two-wheeler's side). Clusters that fit no class (walls, vegetation, poles) are dropped;
8. heading: along the motion for moving clusters (vehicles: the fitted axis turned to point along it;
   pedestrians and cones: the motion itself); still vehicles aligned with the ego's road take the
   traffic-side prior (``traffic_side_heading``: parked and queued vehicles face the traffic of their side
   of the road); the rest keep the fitted axis, whose direction the tracker makes consistent per track;
9. box: vehicles seen from one side are completed to the class's typical size by growing the box *away*
   from the sensor (the unseen half lies behind the visible face); score = how well the cluster fits its
   class (size agreement) times how densely it is observed (saturating in the number of points).

``LidarDetector`` gives each frame the listed sweep nearest ``motion_lag_s`` before it
(``Frame.lidar_sweeps``, moved into the frame's ego frame with the poses) as the earlier sweep.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from actors.detect.base import Detector
from actors.detect.motion import estimate_displacement, occupancy, owned_occupancy
from actors.detect.priors import SIZE_PRIORS_LWH_M
from actors.detect.sweeps import CachedReader
from generator.sources import io
from generator.types import Boxes3D, Frame
from schemas.config import LidarDetectorConfig

_VEHICLES = ("car", "truck", "bus")  # completed to their class's typical size
_AXIS_CLASSES = ("car", "truck", "bus", "trailer", "construction_vehicle", "motorcycle", "bicycle", "barrier")
_PRIOR_CLASSES = ("car", "truck", "bus", "trailer", "construction_vehicle")  # still: traffic-side heading


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
    which ``tests/actors/test_detect_determinism.py`` checks across processes."""
    import open3d as o3d  # open3d: seconds to import; only where this runs

    if len(xy) == 0:
        return np.zeros(0, dtype=np.int64)
    pts = np.column_stack([xy, np.zeros(len(xy))])
    pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(pts))
    return np.asarray(pcd.cluster_dbscan(eps=cfg.cluster_eps_m, min_points=cfg.cluster_min_points))


def classify(long_m: np.ndarray, short_m: np.ndarray, height_m: np.ndarray, height_tol_m, rules,
             motion_along_long: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(class name (C,) object, '' = no class; face (C,) bool) per cluster from its footprint and height.

    ``rules``: ``LidarDetectorConfig.shape_rules`` rows (class, long side, short side, height ranges, view);
    the first matching row wins. ``height_tol_m`` (per cluster): how much of the object's top the scan
    pattern may have missed (the gap between two beams at the cluster's range); it relaxes the lower
    height bounds only. View 'face': the long side runs across the object's heading (a vehicle seen only
    from its front or back; a barrier, whose nuScenes length is its thin side); 'side': along it; 'any':
    either. ``motion_along_long`` (C,) +1 where the cluster moves along its long side, -1 across it, 0
    unknown or still: a 'side' row needs motion along, a 'face' row motion across (a car's face crossing
    the view is a two-wheeler's side)."""
    n = len(long_m)
    motion = np.zeros(n) if motion_along_long is None else np.asarray(motion_along_long)
    conds, names, faces = [], [], []
    for name, (l0, l1), (s0, s1), (h0, h1), view in rules:
        ok = ((long_m >= l0) & (long_m <= l1) & (short_m >= s0) & (short_m <= s1) & (height_m + height_tol_m >= h0)
              & (height_m <= h1))
        if view == "side":
            ok &= motion >= 0
        elif view == "face":
            ok &= motion <= 0
        conds.append(ok)
        names.append(name)
        faces.append(view == "face")
    cls = np.select(conds, names, default="").astype(object)
    face = np.select(conds, faces, default=False).astype(bool)
    return cls, face


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


@dataclass
class Clusters:
    """Per-cluster geometry of one sweep (C clusters, ego frame): BEV rectangle (centre (C, 2), long and
    short extents (C,), axis of the long side (C,) rad), top and ground height (C,), point count (C,), and
    the points themselves (``start``/``count`` into ``points`` sorted by cluster)."""

    points: np.ndarray
    start: np.ndarray
    count: np.ndarray
    centre: np.ndarray
    long_m: np.ndarray
    short_m: np.ndarray
    axis: np.ndarray
    low: np.ndarray  # lowest point
    top: np.ndarray  # highest point
    top_q: np.ndarray  # the height_quantile of the points' heights: a thin pole or branch merged in is not the top
    bottom: np.ndarray
    above: np.ndarray  # (C,) points higher than max_height_m above the cluster's footprint (structure above)

    def owner(self) -> np.ndarray:
        """(len(points),) the index of the kept cluster each point belongs to, -3 for the points of clusters
        too small to keep."""
        own = np.full(len(self.points), -3, dtype=np.int64)
        for i, (s, c) in enumerate(zip(self.start, self.count)):
            own[s:s + c] = i
        return own

    def sample(self, i: int, at_most: int, rng: np.random.Generator, below_top_m: float = 0.0) -> np.ndarray:
        """Points (n, 3) of cluster i, at most ``at_most`` (a seeded subsample), leaving out those within
        ``below_top_m`` of its highest point unless fewer than 3 would remain."""
        s, c = self.start[i], self.count[i]
        pts = self.points[s:s + c]
        low = pts[:, 2] < self.top[i] - below_top_m
        pts = pts[low] if low.sum() >= 3 else pts
        return pts if len(pts) <= at_most else pts[np.sort(rng.choice(len(pts), at_most, replace=False))]


def cluster_geometry(points: np.ndarray, labels: np.ndarray, ground_z: np.ndarray, high: np.ndarray,
                     cfg: LidarDetectorConfig) -> Clusters:
    """Clusters ``labels`` (N,) of obstacle points (N, 3) with ground heights (N,); ``high`` (H, 3) the
    obstacle points cropped above ``max_height_m`` (counted over each cluster's footprint)."""
    ok = labels >= 0
    lab, pts, gz = labels[ok], points[ok], ground_z[ok]
    order = np.argsort(lab, kind="stable")
    lab, pts, gz = lab[order], pts[order], gz[order]
    _, start, count = np.unique(lab, return_index=True, return_counts=True)
    keep = count >= cfg.min_box_points
    start, count = start[keep], count[keep]
    rng = np.random.default_rng(0)
    ctr, ext, ang = np.zeros((len(start), 2)), np.zeros((len(start), 2)), np.zeros(len(start))
    for i, (s, c) in enumerate(zip(start, count)):  # one fit per cluster (tens per sweep); large ones subsampled
        xy = pts[s:s + c, :2]
        ctr[i], ext[i], ang[i] = fit_rectangle(xy if c <= 400 else xy[rng.choice(c, 400, replace=False)])
    long_is_a = ext[:, 0] >= ext[:, 1]
    above = np.zeros(len(start), dtype=np.int64)
    if len(high) and len(start):
        d = np.linalg.norm(high[None, :, :2] - ctr[:, None, :], axis=-1)
        above = (d <= ext.max(axis=1)[:, None] / 2).sum(axis=1)
    top_q = np.zeros(len(start))
    if len(start):
        zs = pts[np.lexsort((pts[:, 2], lab)), 2]  # heights sorted within each cluster's run of rows
        top_q = zs[start + np.floor(cfg.height_quantile * (count - 1)).astype(np.int64)]
    return Clusters(points=pts, start=start, count=count, centre=ctr, long_m=ext.max(axis=1), short_m=ext.min(axis=1),
                    axis=np.where(long_is_a, ang, ang + np.pi / 2), top_q=top_q,
                    top=np.maximum.reduceat(pts[:, 2], start) if len(start) else np.zeros(0),
                    low=np.minimum.reduceat(pts[:, 2], start) if len(start) else np.zeros(0),
                    bottom=np.minimum.reduceat(gz, start) if len(start) else np.zeros(0), above=above)


def cluster_motion(cl: Clusters, earlier: np.ndarray | None, lag_s: float, cfg: LidarDetectorConfig):
    """(velocity (C, 2) m/s, ego frame of the current sweep, NaN where unknown; moving (C,) bool) of each
    cluster from the earlier sweep's obstacle points ``earlier`` (M, 2+) already in the current ego frame,
    ``lag_s`` seconds before (``actors.detect.motion``). Clusters smaller than ``motion_small_m`` search
    every direction up to ``motion_max_speed_small_mps``; larger ones along their long side and across it
    up to ``motion_max_speed_mps`` with ``motion_lateral_speed_mps`` of sideways slack. Only moving clusters
    get a velocity: a still one's NaN leaves its heading to the tracker's per-track consistency
    (``actors.track.heading`` looks at boxes without detector velocity)."""
    n = len(cl.start)
    vel = np.full((n, 2), np.nan)
    moving = np.zeros(n, dtype=bool)
    if earlier is None or not len(earlier) or not n or lag_s <= 0:
        return vel, moving
    occ = occupancy(earlier[:, :3], cfg.motion_cell_m, cfg.motion_z_cell_m)
    rng = np.random.default_rng(1)
    # A ring crosses a roof or bonnet at ranges fixed to the sensor, not to the object: only the points
    # below the top (the vertical faces) are matched.
    xy = [cl.sample(i, cfg.motion_points, rng, cfg.motion_skip_top_m) for i in range(n)]
    small = cl.long_m < cfg.motion_small_m
    lat = cfg.motion_lateral_speed_mps * lag_s
    fast = cfg.motion_max_speed_mps * lag_s
    slow = cfg.motion_max_speed_small_mps * lag_s
    args = dict(occ=occ, cell_m=cfg.motion_cell_m, z_cell_m=cfg.motion_z_cell_m, coarse_m=cfg.motion_coarse_m,
                fine_m=cfg.motion_fine_m, min_gain=cfg.motion_min_gain, min_match=cfg.motion_min_match,
                owned=owned_occupancy(cl.points, cl.owner(), cfg.motion_cell_m, cfg.motion_z_cell_m),
                max_taken=cfg.motion_max_taken)
    # two searches for the larger clusters: along the long side (a side view), across it (a face view)
    d1, s1, still = estimate_displacement(xy, cl.axis, np.where(small, slow, fast), np.where(small, slow, lat), **args)
    d2, s2, _ = estimate_displacement(xy, cl.axis + np.pi / 2, np.where(small, 0.0, fast), np.where(small, 0.0, lat),
                                      **args)
    disp = np.where((s2 > s1)[:, None], d2, d1)
    best = np.maximum(s1, s2)
    speed = np.hypot(disp[:, 0], disp[:, 1]) / lag_s
    moving = (best > still) & (speed >= cfg.motion_min_speed_mps)
    vel[moving] = disp[moving] / lag_s
    return vel, moving


def _wrap(a):
    return np.arctan2(np.sin(a), np.cos(a))


def traffic_side_heading(centre: np.ndarray, yaw: np.ndarray, cfg: LidarDetectorConfig) -> np.ndarray:
    """Heading (C,) of still vehicles whose axis (``yaw`` modulo pi) lies within ``prior_max_angle_deg`` of the
    ego vehicle's: the direction of traffic on their side of the ego's road (right-hand traffic: the ego's
    direction for vehicles right of ``prior_lane_split_m``, the opposite beyond it, where oncoming lanes and
    the far kerb are; mirrored for left-hand traffic). Other yaws are returned unchanged."""
    if cfg.traffic_side == "none":
        return yaw
    along = np.abs(np.cos(yaw)) >= np.cos(np.deg2rad(cfg.prior_max_angle_deg))
    left = centre[:, 1] > (cfg.prior_lane_split_m if cfg.traffic_side == "right" else -cfg.prior_lane_split_m)
    forward = ~left if cfg.traffic_side == "right" else left
    want_cos_sign = np.where(forward, 1.0, -1.0)
    flip = along & (np.sign(np.cos(yaw)) != want_cos_sign)
    return np.where(flip, yaw + np.pi, yaw)


def fit_boxes(cl: Clusters, cfg: LidarDetectorConfig, velocity: np.ndarray | None = None,
              moving: np.ndarray | None = None) -> Boxes3D:
    """Boxes3D (ego frame) of the clusters that pass the structure test and classify (module docstring)."""
    n = len(cl.start)
    if not n:
        return Boxes3D.empty()
    velocity = np.full((n, 2), np.nan) if velocity is None else velocity
    moving = np.zeros(n, dtype=bool) if moving is None else moving
    ctr, long_m, short_m, count = cl.centre, cl.long_m, cl.short_m, cl.count
    reach = cl.top - cl.bottom
    height = cl.top_q - cl.bottom
    tol = np.linalg.norm(ctr, axis=1) * np.tan(np.deg2rad(cfg.beam_spacing_deg))
    # Structure: a cluster reaching up near the height crop with points above it is part of something taller
    # than any road user (a wall, a building edge, a pole, a sign); so is one taller than structure_height_m.
    near_crop = reach + tol >= cfg.max_height_m - cfg.structure_gap_m
    structure = ((cl.above >= cfg.structure_min_points_above) & near_crop) | (height > cfg.structure_height_m)
    motion_dir = np.where(moving, np.where(np.abs(np.cos(np.arctan2(velocity[:, 1], velocity[:, 0]) - cl.axis))
                                           >= np.cos(np.pi / 4), 1.0, -1.0), 0.0)
    cls, face = classify(long_m, short_m, height, tol, cfg.shape_rules, motion_dir)
    cls[structure] = ""
    # Standing on nothing: a pedestrian, two-wheeler, cone or barrier's lowest point lies within a beam gap
    # of the lowest height the ground filter keeps; one higher up is a sign, a branch, a hedge top. (Not
    # applied to vehicles: a car behind another shows only its upper half.)
    floating = cl.low - cl.bottom > cfg.ground_distance_m + tol + cfg.floating_m
    cls[floating & ~np.isin(cls, _VEHICLES)] = ""
    yaw = np.where(face, cl.axis + np.pi / 2, cl.axis)
    length = np.where(face, short_m, long_m)
    width = np.where(face, long_m, short_m)
    # Heading: the direction of motion where the cluster moves (small objects: the motion itself),
    # the traffic-side prior for still vehicles, else the fitted axis.
    mdir = np.arctan2(velocity[:, 1], velocity[:, 0])
    small = ~np.isin(cls, _AXIS_CLASSES)
    yaw = np.where(moving & small, mdir, yaw)
    yaw = np.where(moving & ~small & (np.cos(yaw - mdir) < 0), yaw + np.pi, yaw)
    still_veh = ~moving & np.isin(cls, _PRIOR_CLASSES)
    yaw = np.where(still_veh, traffic_side_heading(ctr, yaw, cfg), yaw)
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
    center = np.column_stack([ctr, cl.bottom + height / 2])
    return Boxes3D(center[valid], np.column_stack([new_l, new_w, height])[valid], _wrap(yaw)[valid], cls[valid],
                   score=np.clip(score[valid], 0, 1), velocity_mps=velocity[valid], num_lidar_pts=count[valid])


def _obstacles(points: np.ndarray, cfg: LidarDetectorConfig):
    """Cropped, ground-removed points of a sweep (ego frame): (obstacles (N, 3), their ground z (N,),
    points above ``max_height_m`` (H, 3))."""
    p = np.asarray(points, dtype=np.float64)
    if p.ndim != 2 or p.shape[1] < 3:
        raise ValueError(f"points must be (N, >=3), got {p.shape}")
    p = p[np.isfinite(p[:, :3]).all(axis=1), :3]
    r = np.linalg.norm(p[:, :2], axis=1)
    ego = (np.abs(p[:, 0]) <= cfg.ego_half_length_m) & (np.abs(p[:, 1]) <= cfg.ego_half_width_m)
    p = p[(r <= cfg.max_range_m) & ~ego]
    if len(p) < cfg.min_box_points:
        return np.zeros((0, 3)), np.zeros(0), np.zeros((0, 3))
    ground, gz = remove_ground(p, cfg)
    rel = p[:, 2] - gz
    obst = ~ground & (rel <= cfg.max_height_m)
    return p[obst], gz[obst], p[~ground & (rel > cfg.max_height_m)]


def detect_points(points_ego: np.ndarray, cfg: LidarDetectorConfig, earlier_ego: np.ndarray | None = None,
                  lag_s: float = 0.0) -> Boxes3D:
    """Pure core: (N, >=3) ego-frame LiDAR points -> Boxes3D (ego frame). ``earlier_ego`` (M, >=3): an earlier
    sweep moved into this sweep's ego frame, ``lag_s`` seconds before it; with it, boxes get velocities and
    headings from motion (NaN velocity where unknown)."""
    p, gz, high = _obstacles(points_ego, cfg)
    if len(p) < cfg.min_box_points:
        return Boxes3D.empty()
    # Voxel-downsample for clustering speed; every original point inherits its voxel's cluster.
    if cfg.voxel_size_m > 0:
        vox = np.floor(p / cfg.voxel_size_m).astype(np.int64)
        _, first, inv = np.unique(_grid_key(vox), return_index=True, return_inverse=True)
        lab = cluster_points(p[first, :2], cfg)[inv]
    else:
        lab = cluster_points(p[:, :2], cfg)
    cl = cluster_geometry(p, lab, gz, high, cfg)
    earlier = _obstacles(earlier_ego, cfg)[0] if earlier_ego is not None else None
    velocity, moving = cluster_motion(cl, earlier, lag_s, cfg)
    return fit_boxes(cl, cfg, velocity, moving)


def earlier_sweep(frame: Frame, cfg: LidarDetectorConfig, read=None) -> tuple[np.ndarray | None, float]:
    """(points (M, 3) of the frame's listed sweep nearest ``motion_lag_s`` before it, moved into the frame's
    ego frame; the lag in s), or (None, 0) when the frame lists none within ``motion_max_lag_s``."""
    sweeps = frame.lidar_sweeps or []
    lags = np.array([(frame.timestamp_us - sw.timestamp_us) / 1e6 for sw in sweeps])
    ok = (lags > 0) & (lags <= cfg.motion_max_lag_s)
    if not ok.any():
        return None, 0.0
    i = int(np.argmin(np.where(ok, np.abs(lags - cfg.motion_lag_s), np.inf)))
    sw = sweeps[i]
    rec = (read or io.read_lidar_records)(sw.lidar_path, sw.lidar_format, sw.ego_SE3_lidar, io.NUSCENES_RECORD_FLOATS)
    ego_SE3_sweep = frame.city_SE3_ego.inverse().compose(sw.city_SE3_ego).compose(sw.ego_SE3_lidar)
    return ego_SE3_sweep.transform_points(rec[:, :3].astype(np.float64)), float(lags[i])


class LidarDetector(Detector):
    name = "lidar"

    def __call__(self, frames: list[Frame]) -> list[Boxes3D]:
        cfg = self.cfg.lidar
        read = CachedReader(frames[0].scene_id if frames else None)
        out = []
        for fr in frames:
            earlier, lag = earlier_sweep(fr, cfg, read) if cfg.motion else (None, 0.0)
            out.append(self._postfilter(detect_points(io.load_lidar_ego(fr), cfg, earlier, lag)))
            read.next_batch()
        return out
