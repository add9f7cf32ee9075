"""Scripted, seeded scenes: a four-way intersection, buildings and poles, the ego's manoeuvres and agents
acting out STRIDE-QA / DRAMA-X / PIE scenarios.

Everything here is in the scene's *local* frame: the intersection centre is the origin, road A runs
along x, road B along y, z up, ground at z = 0. Traffic drives on the right. Each road has two lanes per
direction (3.5 m), a 2.5 m parking strip, a 4 m sidewalk, then buildings. ``writer`` maps the local frame
into the global (map) frame with one rigid transform per scene.

Motion lives on a fixed time grid ``TIME_GRID_S`` (seconds from the scene's first keyframe, step
``DT_S``): ego poses (rear-axle origin, like nuScenes) and agent box centres, yaw following motion.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from generator.synth.rig import EGO_CENTER_OFFSET_X_M, EGO_SIZE_LWH_M
from schemas.vocab import SCRIPTED_SCENARIOS

DT_S = 0.05
TIME_GRID_S = np.round(np.arange(-1.0, 20.5 + 1e-9, DT_S), 6)
SCENE_DURATION_S = 20.0

LANE_W_M = 3.5
ROAD_HALF_M = 7.0  # two lanes per direction
PARK_HALF_M = 9.5  # + parking strip = curb
SIDEWALK_HALF_M = 13.5
BUILDING_SETBACK_M = 14.0
INNER_LANE_M = 1.75
OUTER_LANE_M = 5.25
CROSSWALK_U_M = (8.5, 12.0)  # |along-road| extent of the zebra crossings
STOP_LINE_U_M = 13.0
EGO_STOP_S_M = -STOP_LINE_U_M - 0.5 - (EGO_CENTER_OFFSET_X_M + EGO_SIZE_LWH_M[0] / 2)  # rear axle when stopped

# nuScenes-like mean sizes (width, length, height) in metres.
CLASS_SIZE_WLH_M = {
    "vehicle.car": (1.95, 4.62, 1.73),
    "vehicle.truck": (2.51, 6.93, 2.84),
    "vehicle.bus.rigid": (2.94, 11.19, 3.47),
    "vehicle.trailer": (2.90, 12.28, 3.87),
    "vehicle.construction": (2.73, 6.56, 3.24),
    "human.pedestrian.adult": (0.67, 0.73, 1.77),
    "human.pedestrian.child": (0.52, 0.54, 1.37),
    "vehicle.motorcycle": (0.77, 2.11, 1.47),
    "vehicle.bicycle": (0.60, 1.70, 1.28),
    "movable_object.trafficcone": (0.41, 0.41, 1.07),
    "movable_object.barrier": (2.53, 0.50, 0.98),
}
SCENARIOS = SCRIPTED_SCENARIOS


# ----------------------------------------------------------------------------------------------- routes
class Route:
    """A lane-following path through the intersection: approach straight, optional 90 degree arc, exit.

    Built in the canonical frame of an approach along +x in the lane at y = -lane_offset_m, then rotated
    by ``heading0_rad`` (0: road A eastbound, pi/2: road B northbound, ...). Arc length ``s`` equals the
    canonical x on the approach, so s = 0 is the intersection centre line and s = -13 the stop line.
    """

    def __init__(self, heading0_rad: float, lane_offset_m: float, turn: str | None = None, radius_m: float = 8.0):
        o = lane_offset_m
        pts = [np.array([[-800.0, -o]])]
        heads = [np.array([0.0])]
        self.turn = turn
        self.radius_m = radius_m
        if turn is None:
            pts.append(np.array([[800.0, -o]]))
            heads.append(np.array([0.0]))
            self.arc_s = None
        else:
            n = max(int(radius_m * np.pi / 2 / 0.2), 8)
            if turn == "right":
                xs = -o - radius_m
                c = np.array([xs, -o - radius_m])
                phi = np.linspace(np.pi / 2, 0.0, n)
                arc_heading = phi - np.pi / 2
                exit_pt = np.array([[-o, -800.0]])
                exit_h = -np.pi / 2
            elif turn == "left":
                xs = o - radius_m
                c = np.array([xs, -o + radius_m])
                phi = np.linspace(-np.pi / 2, 0.0, n)
                arc_heading = phi + np.pi / 2
                exit_pt = np.array([[o, 800.0]])
                exit_h = np.pi / 2
            else:
                raise ValueError(f"turn must be None, 'left' or 'right', got {turn!r}")
            pts.append(c + radius_m * np.stack([np.cos(phi), np.sin(phi)], axis=1))
            heads.append(arc_heading)
            pts.append(exit_pt)
            heads.append(np.array([exit_h]))
            self.arc_s = (xs, xs + radius_m * np.pi / 2)
        p = np.concatenate(pts)
        h = np.concatenate(heads)
        seg = np.linalg.norm(np.diff(p, axis=0), axis=1)
        self.s = np.concatenate([[-800.0], -800.0 + np.cumsum(seg)])
        c0, s0 = np.cos(heading0_rad), np.sin(heading0_rad)
        self.xy = p @ np.array([[c0, s0], [-s0, c0]])
        self.heading = np.unwrap(h + heading0_rad)
        self.heading0_rad = heading0_rad
        self.lane_offset_m = lane_offset_m

    def pose(self, s: np.ndarray, lateral_m: np.ndarray | float = 0.0):
        """Points at arc length s (T,) shifted ``lateral_m`` to the left -> (x (T,), y (T,), heading (T,))."""
        s = np.asarray(s, dtype=np.float64)
        x = np.interp(s, self.s, self.xy[:, 0])
        y = np.interp(s, self.s, self.xy[:, 1])
        h = np.interp(s, self.s, self.heading)
        lat = np.broadcast_to(np.asarray(lateral_m, dtype=np.float64), s.shape)
        return x - lat * np.sin(h), y + lat * np.cos(h), h

    def project(self, xy: np.ndarray) -> float:
        """Arc length of the route point nearest to ``xy`` (2,)."""
        ss = np.arange(-300.0, 300.0, 0.25)
        x, y, _ = self.pose(ss)
        return float(ss[np.argmin((x - xy[0]) ** 2 + (y - xy[1]) ** 2)])


def turn_radius_m(turn: str | None) -> float:
    return {"left": 11.0, "right": 7.5}.get(turn, 8.0)


def turn_speed_mps(turn: str | None) -> float:
    return {"left": 5.5, "right": 4.5}.get(turn, 99.0)


def lane_for_turn(turn: str | None, rng: np.random.Generator) -> float:
    """Right turns from the outer lane, left turns from the inner lane, straight from either."""
    if turn == "left":
        return INNER_LANE_M
    if turn == "right":
        return OUTER_LANE_M
    return float(rng.choice([INNER_LANE_M, OUTER_LANE_M]))


def simulate_longitudinal(route: Route, t: np.ndarray, s0: float, v_target: np.ndarray, *, v0: float | None = None,
                          a_acc: float = 2.0, a_dec: float = 3.0, stop_s: float | None = None,
                          stop_hold_s: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Integrate arc length and speed along ``route`` on the time grid ``t`` (T,).

    Speed tracks ``v_target`` (T,) with bounded acceleration, slows for the route's arc (turn speed),
    and, with ``stop_s``, brakes to a standstill there, waits ``stop_hold_s`` and drives on.
    Returns (s (T,), v (T,)).
    """
    n = len(t)
    s = np.empty(n)
    v = np.empty(n)
    s[0] = s0
    v[0] = v_target[0] if v0 is None else v0
    vt = turn_speed_mps(route.turn)
    arc = route.arc_s
    stopping = stop_s is not None
    release_t = np.inf
    for i in range(1, n):
        dt = t[i] - t[i - 1]
        si, vi = s[i - 1], v[i - 1]
        target = v_target[i]
        if arc is not None:
            if si < arc[0]:
                target = min(target, np.sqrt(vt * vt + 2 * 0.8 * a_dec * (arc[0] - si)))
            elif si <= arc[1]:
                target = min(target, vt)
        if stopping:
            if t[i] >= release_t:
                stopping = False
            else:
                target = min(target, np.sqrt(max(0.0, 2 * 0.8 * a_dec * (stop_s - si - 0.05))))
        dv = np.clip(target - vi, -1.4 * a_dec * dt, a_acc * dt)
        vn = max(0.0, vi + dv)
        sn = si + 0.5 * (vi + vn) * dt
        if stopping and sn >= stop_s:
            sn, vn = stop_s, 0.0
        if stopping and release_t == np.inf and vn < 0.05 and stop_s - sn < 0.6:
            release_t = t[i] + stop_hold_s
        s[i], v[i] = sn, vn
    return s, v


def motion_yaw(x: np.ndarray, y: np.ndarray, fallback: np.ndarray, min_speed: float = 0.3) -> np.ndarray:
    """Heading from the direction of motion where moving, else the last moving heading (or ``fallback``)."""
    dx, dy = np.gradient(x, DT_S), np.gradient(y, DT_S)
    moving = np.hypot(dx, dy) > min_speed
    yaw = np.where(moving, np.arctan2(dy, dx), np.nan)
    if not moving.any():
        return np.asarray(fallback, dtype=np.float64) * np.ones_like(x)
    idx = np.where(moving, np.arange(len(x)), -1)
    idx = np.maximum.accumulate(idx)
    first = int(np.argmax(moving))
    idx[idx < 0] = first
    out = yaw[idx]
    # before the first motion keep the route heading when it is known
    fb = np.broadcast_to(np.asarray(fallback, dtype=np.float64), x.shape)
    out[:first] = np.where(np.isfinite(fb[:first]), fb[:first], out[:first])
    return np.unwrap(out)


def smoothstep(t: np.ndarray, t0: float, dur: float) -> np.ndarray:
    u = np.clip((t - t0) / dur, 0.0, 1.0)
    return u * u * (3 - 2 * u)


# ----------------------------------------------------------------------------------------------- tracks
@dataclass
class Track:
    """One scripted agent on ``TIME_GRID_S``: box centre x, y (local frame), yaw, speed (T,) each."""

    category: str
    size_wlh_m: np.ndarray
    scenario: str
    x: np.ndarray
    y: np.ndarray
    yaw: np.ndarray
    speed_mps: np.ndarray
    ridden: bool = True  # cycles: with rider
    parked: bool = False  # vehicles: parked rather than stopped
    details: dict = field(default_factory=dict)

    @property
    def z(self) -> float:
        return float(self.size_wlh_m[2] / 2)


@dataclass
class EgoScript:
    """Ego rear-axle poses and the scripted manoeuvre labels on ``TIME_GRID_S``."""

    x: np.ndarray
    y: np.ndarray
    yaw: np.ndarray
    speed_mps: np.ndarray
    accel_mps2: np.ndarray
    maneuver: np.ndarray  # (T,) str from schemas.vocab.MANEUVERS
    speed_status: np.ndarray  # (T,) str from schemas.vocab.SPEED_STATUS
    route: Route
    s: np.ndarray
    lateral_m: np.ndarray
    plan: dict
    moves: list = field(default_factory=list)  # (t0_s, duration_s, 'left' | 'right'): lateral moves, exact

    def box_center(self) -> tuple[np.ndarray, np.ndarray]:
        return (self.x + EGO_CENTER_OFFSET_X_M * np.cos(self.yaw), self.y + EGO_CENTER_OFFSET_X_M * np.sin(self.yaw))


@dataclass
class StaticBox:
    """Unannotated structure (buildings, poles): centre (3,), size lwh (3,), yaw, colour RGB, LiDAR intensity."""

    center_m: np.ndarray
    size_lwh_m: np.ndarray
    yaw_rad: float
    color_rgb: tuple
    intensity: float
    kind: str


@dataclass
class SceneScript:
    seed: int
    index: int
    ego: EgoScript
    tracks: list[Track]
    statics: list[StaticBox]
    local_extent_m: np.ndarray  # (2, 2) [[xmin, ymin], [xmax, ymax]] of everything drawn


# ------------------------------------------------------------------------------------------- ego plan
def _lane_change_windows(t, s, v, ok_s, dur):
    """Start indices i where a lane change of ``dur`` s starting at t[i] keeps speed > 4 m/s and s in ok_s."""
    n = int(round(dur / DT_S))
    good = (v > 4.0) & ok_s & (t >= -0.5)
    starts = []
    for i in range(len(t) - n):
        if t[i + n] > 19.5:
            break
        if good[i:i + n + 1].all():
            starts.append(i)
    return starts


def script_ego(rng: np.random.Generator) -> EgoScript:
    t = TIME_GRID_S
    turn = [None, "left", "right"][int(rng.choice(3, p=[0.4, 0.3, 0.3]))]
    stop = bool(rng.random() < 0.4)
    v_cruise = float(rng.uniform(7.0, 13.5))
    # when the ego reaches the stop line: early enough that a stop (2.5-5 s) and a turn fit in the 20 s
    t_int = float(rng.uniform(5.0, 9.0) if stop else rng.uniform(6.0, 13.0) if turn else rng.uniform(3.0, 16.0))
    v_prog = np.full(len(t), v_cruise)
    t_change = float(rng.uniform(2.0, 16.0))
    v_prog[t >= t_change] = float(np.clip(v_cruise + rng.uniform(-3.5, 2.5), 5.0, 15.0))
    lane_turn = lane_for_turn(turn, rng)
    route = Route(0.0, lane_turn, turn, turn_radius_m(turn))
    s_start = -STOP_LINE_U_M - v_cruise * (t_int - t[0])
    hold = float(rng.uniform(2.5, 5.0))
    s, v = simulate_longitudinal(route, t, s_start, v_prog, stop_s=EGO_STOP_S_M if stop else None, stop_hold_s=hold)

    # lane changes: lateral offset from the route's lane, + = left
    arc = route.arc_s
    if arc is not None:
        straight_ok = (s < arc[0] - 8.0) | (s > arc[1] + 8.0)
    else:
        straight_ok = np.abs(s) > 25.0
    if stop:
        stopped_idx = np.nonzero(v < 0.05)[0]
        release = t[stopped_idx[-1]] if len(stopped_idx) else t[-1]
        straight_ok &= (s < EGO_STOP_S_M - 10.0) | (t > release)
    changes = []  # (t0, dur, from_lane, to_lane) as lane offsets from the road centre (inner < outer)
    other = INNER_LANE_M if lane_turn == OUTER_LANE_M else OUTER_LANE_M
    start_lane = float(rng.choice([INNER_LANE_M, OUTER_LANE_M])) if turn is not None else lane_turn
    dur = float(rng.uniform(3.5, 4.5))
    if turn is not None and start_lane != lane_turn:
        starts = _lane_change_windows(t, s, v, straight_ok & (s < arc[0] - 8.0), dur)
        if starts:
            i0 = int(rng.choice(starts))
            changes.append((float(t[i0]), dur, start_lane, lane_turn))
        else:
            start_lane = lane_turn
    if not changes and rng.random() < 0.6:
        ok = straight_ok if arc is None else straight_ok & (s > arc[1] + 8.0)
        starts = _lane_change_windows(t, s, v, ok, dur)
        if starts:
            i0 = int(rng.choice(starts))
            changes.append((float(t[i0]), dur, lane_turn, other))
    lane = np.full(len(t), start_lane)
    for t0, d, a, b in changes:
        lane = np.where(t >= t0, a + (b - a) * smoothstep(t, t0, d), lane)
    # the route is built in ``lane_turn``; lateral offset from it, + = left (towards the road centre)
    lateral = lane_turn - lane
    plan = {"turn": turn, "stop": stop, "cruise_mps": round(v_cruise, 3), "start_lane_offset_m": start_lane,
            "lane_changes": [{"t_s": round(t0, 3), "duration_s": round(d, 3),
                              "direction": "left" if b < a else "right"} for t0, d, a, b in changes],
            "pull_over": None}
    moves = [(t0, d, "left" if b < a else "right") for t0, d, a, b in changes]
    return _ego_from_plan(route, s, v, lateral, plan, moves)


def _ego_from_plan(route: Route, s: np.ndarray, v: np.ndarray, lateral: np.ndarray, plan: dict,
                   moves: list) -> EgoScript:
    """Poses and scripted labels of the ego driving ``route`` at arc length ``s`` / speed ``v`` with lateral
    offset ``lateral`` (T,) each: lateral ``moves`` (lane changes, a pull-over) are labelled by their direction,
    the route's arc by its turn, any speed under 0.3 m/s is Stop."""
    t = TIME_GRID_S
    x, y, h = route.pose(s, lateral)
    yaw = motion_yaw(x, y, h)
    acc = np.gradient(v, DT_S)
    k = int(round(0.5 / DT_S))
    acc_s = np.convolve(np.pad(acc, k, mode="edge"), np.ones(2 * k + 1) / (2 * k + 1), mode="valid")
    man = np.full(len(t), "Straight", dtype=object)
    for t0, d, direction in moves:
        man[(t >= t0) & (t <= t0 + d)] = "Change Lane Left" if direction == "left" else "Change Lane Right"
    arc = route.arc_s
    if arc is not None:
        in_arc = (s >= arc[0]) & (s <= arc[1])
        man[in_arc] = "Turn Left" if route.turn == "left" else "Turn Right"
    man[v < 0.3] = "Stop"
    status = np.where(acc_s > 0.3, "Accelerate", np.where(acc_s < -0.3, "Decelerate", "Maintain Speed")).astype(object)
    return EgoScript(x=x, y=y, yaw=yaw, speed_mps=v, accel_mps2=acc_s, maneuver=man, speed_status=status,
                     route=route, s=s, lateral_m=lateral, plan=plan, moves=list(moves))


PULL_OVER_LANE_M = (ROAD_HALF_M + PARK_HALF_M) / 2  # the parking strip's centre line
PULL_OVER_EVERY = 4  # scene indices 2, 6, 10, ... are pull-over scenes (so make run's 3 scenes hold one)


def is_pull_over_scene(index: int) -> bool:
    return index % PULL_OVER_EVERY == 2


def script_pull_over(rng: np.random.Generator, ego: EgoScript) -> EgoScript:
    """The ego of a pull-over scene (``is_pull_over_scene``): it drives straight through the intersection in the
    outer lane at the drawn cruise speed (leaving the junction 1-4 s into the scene), then, at a random time
    that lets it come to rest by 19 s, moves into the parking strip on its right over 3.5-4.5 s, braking from
    a third of the way through that move at a constant 1.5-2.5 m/s² to a standstill, and waits there until the scene ends.
    The whole manoeuvre fits in the scene (like lane changes, whose labels need the poses after them).

    ``rng`` is the pull-over's own stream (``script_scene``) and ``ego`` the scene's scripted ego, whose
    draws are made either way: a scene that is not a pull-over scene is exactly what it was before
    pull-overs existed, and the agents of a pull-over scene come from the same stream as before (they then
    act around the new ego path)."""
    t = TIME_GRID_S
    v0 = float(ego.plan["cruise_mps"])
    decel, dur = float(rng.uniform(1.5, 2.5)), float(rng.uniform(3.5, 4.5))
    delay = dur / 3  # braking starts a third of the way through the move
    route = Route(0.0, OUTER_LANE_M, None)
    t_exit = float(rng.uniform(1.0, 4.0))
    s0 = STOP_LINE_U_M + 12.0 - v0 * (t_exit - t[0])
    latest = 19.0 - delay - v0 / decel
    t_p = float(np.round(rng.uniform(max(5.0, t_exit + 1.0), max(5.0, t_exit + 1.0, latest)) / DT_S) * DT_S)
    v = np.where(t < t_p + delay, v0, np.maximum(0.0, v0 - decel * (t - t_p - delay)))
    s = s0 + np.r_[0.0, np.cumsum(0.5 * (v[1:] + v[:-1]) * np.diff(t))]
    lateral = -(PULL_OVER_LANE_M - OUTER_LANE_M) * smoothstep(t, t_p, dur)  # + = left
    plan = {"turn": None, "stop": False, "cruise_mps": ego.plan["cruise_mps"], "start_lane_offset_m": OUTER_LANE_M,
            "lane_changes": [], "pull_over": {"t_s": round(t_p, 3), "duration_s": round(dur, 3), "side": "right",
                                              "decel_mps2": round(decel, 3)}}
    return _ego_from_plan(route, s, v, lateral, plan, [(t_p, dur, "right")])


# ------------------------------------------------------------------------------------------- collisions
def _obb_corners(cx, cy, yaw, l, w):
    c, s = np.cos(yaw), np.sin(yaw)
    ox = np.array([0.5, 0.5, -0.5, -0.5])
    oy = np.array([0.5, -0.5, -0.5, 0.5])
    l, w = np.asarray(l)[:, None], np.asarray(w)[:, None]
    px = cx[:, None] + c[:, None] * ox * l - s[:, None] * oy * w
    py = cy[:, None] + s[:, None] * ox * l + c[:, None] * oy * w
    return np.stack([px, py], axis=-1)  # (T, 4, 2)


def boxes_overlap(a, b) -> np.ndarray:
    """Per-time overlap of two oriented rectangles, each (cx, cy, yaw, length, width) arrays (T,) -> (T,) bool."""
    ca, cb = _obb_corners(*a), _obb_corners(*b)
    axes = np.concatenate([
        np.stack([np.cos(a[2]), np.sin(a[2])], -1)[:, None], np.stack([-np.sin(a[2]), np.cos(a[2])], -1)[:, None],
        np.stack([np.cos(b[2]), np.sin(b[2])], -1)[:, None], np.stack([-np.sin(b[2]), np.cos(b[2])], -1)[:, None],
    ], axis=1)  # (T, 4, 2)
    pa = np.einsum("tkd,tcd->tkc", axes, ca)
    pb = np.einsum("tkd,tcd->tkc", axes, cb)
    sep = (pa.max(-1) < pb.min(-1)) | (pb.max(-1) < pa.min(-1))
    return ~sep.any(axis=1)


_CHECK = (TIME_GRID_S >= -0.5) & (TIME_GRID_S <= 19.6)


def _rect(track: Track, margin: float):
    sel = _CHECK
    T = int(sel.sum())
    return (track.x[sel], track.y[sel], track.yaw[sel], np.full(T, track.size_wlh_m[1] + 2 * margin),
            np.full(T, track.size_wlh_m[0] + 2 * margin))


def collides(track: Track, ego: EgoScript, others: list[Track], ego_margin: float = 0.6, margin: float = 0.3) -> bool:
    """Whether ``track`` (inflated by the margins) touches the ego or any of ``others`` between -0.5 and 19.6 s."""
    sel = _CHECK
    T = int(sel.sum())
    ex, ey = ego.box_center()
    e = (ex[sel], ey[sel], ego.yaw[sel], np.full(T, EGO_SIZE_LWH_M[0]), np.full(T, EGO_SIZE_LWH_M[1]))
    r_e = _rect(track, ego_margin)
    if _overlap_any(r_e, e):
        return True
    r = _rect(track, margin)
    for o in others:
        if _overlap_any(r, _rect(o, 0.0)):
            return True
    return False


def _overlap_any(a, b) -> bool:
    """Any-time overlap of two rectangle tracks; times whose centres are farther apart than the sum of the
    half-diagonals are skipped before the exact separating-axis test."""
    ra = 0.5 * np.hypot(a[3], a[4])
    rb = 0.5 * np.hypot(b[3], b[4])
    near = np.hypot(a[0] - b[0], a[1] - b[1]) < ra + rb
    if not near.any():
        return False
    return bool(boxes_overlap(tuple(x[near] for x in a), tuple(x[near] for x in b)).any())


# ------------------------------------------------------------------------------------------- agents
def _size(rng, category, ridden=True):
    w, l, h = CLASS_SIZE_WLH_M[category]
    jit = rng.uniform(0.92, 1.08, 3)
    size = np.array([w, l, h]) * jit
    if category in ("vehicle.bicycle", "vehicle.motorcycle") and ridden:
        size[2] = max(size[2], rng.uniform(1.65, 1.85))
    if category == "vehicle.bicycle" and not ridden:
        size[2] = rng.uniform(1.0, 1.15)
    return size


def _vehicle_class(rng, weights=None):
    names = ["vehicle.car", "vehicle.truck", "vehicle.bus.rigid", "vehicle.motorcycle"]
    p = weights or [0.72, 0.12, 0.08, 0.08]
    return names[int(rng.choice(len(names), p=p))]


def _track_on_route(category, size, scenario, route, s, lateral=0.0, **kw) -> Track:
    x, y, h = route.pose(s, lateral)
    yaw = motion_yaw(x, y, h)
    speed = np.hypot(np.gradient(x, DT_S), np.gradient(y, DT_S))
    return Track(category, size, scenario, x, y, yaw, speed, **kw)


def _ego_road_at(ego: EgoScript, i: int) -> tuple[float, float, float]:
    """(road heading, lane offset of the ego's lane, route s) of the ego at grid index i (straight parts)."""
    arc = ego.route.arc_s
    h0 = ego.route.heading0_rad
    if arc is not None and ego.s[i] > arc[1]:
        h0 = h0 + (np.pi / 2 if ego.route.turn == "left" else -np.pi / 2)
    lane = ego.route.lane_offset_m - ego.lateral_m[i]
    return float(h0), float(lane), float(ego.s[i])


def _ego_straight_idx(ego: EgoScript, tmin=0.5, tmax=19.0, vmin=2.0) -> np.ndarray:
    t = TIME_GRID_S
    ok = (t >= tmin) & (t <= tmax) & (ego.speed_mps > vmin)
    arc = ego.route.arc_s
    if arc is not None:
        ok &= (ego.s < arc[0] - 3) | (ego.s > arc[1] + 3)
    return np.nonzero(ok)[0]


def _ego_moment(rng, ego: EgoScript, tmin: float, tmax: float, vmin: float = 2.0, in_lane: bool = False):
    """A random grid index where the ego drives straight (see ``_ego_straight_idx``) with the road there:
    ``(i, heading0_rad, lane_offset_m, s_m)``, or None when there is no such moment (or, with ``in_lane``,
    the ego is mid lane change at the drawn moment)."""
    idx = _ego_straight_idx(ego, tmin, tmax, vmin=vmin)
    if not len(idx):
        return None
    i = int(rng.choice(idx))
    h0, lane_e, s_e = _ego_road_at(ego, i)
    if in_lane and abs(lane_e - INNER_LANE_M) > 0.3 and abs(lane_e - OUTER_LANE_M) > 0.3:
        return None
    return i, h0, lane_e, s_e


def _oncoming_pass(rng, ego):
    moment = _ego_moment(rng, ego, 1.0, 18.0)
    if moment is None:
        return None
    i, h0, _, _ = moment
    lane = float(rng.choice([INNER_LANE_M, OUTER_LANE_M]))
    route = Route(h0 + np.pi, lane, None)
    s_p = route.project(np.array([ego.x[i], ego.y[i]]))
    va = float(rng.uniform(7.0, 13.0))
    s = s_p + va * (TIME_GRID_S - TIME_GRID_S[i])
    cat = _vehicle_class(rng)
    tr = _track_on_route(cat, _size(rng, cat), "oncoming_pass", route, s,
                         details={"pass_time_s": round(float(TIME_GRID_S[i]), 3)})
    return tr


def _overtake(rng, ego):
    """A slower vehicle in the lane beside the ego (the ego's previous lane after a lane change) that the
    ego passes at some time."""
    moment = _ego_moment(rng, ego, 2.0, 17.0, vmin=6.0, in_lane=True)
    if moment is None:
        return None
    i, h0, lane_e, _ = moment
    lane = OUTER_LANE_M if lane_e < 3.5 else INNER_LANE_M
    route = Route(h0, lane, None)
    s_p = route.project(np.array([ego.x[i], ego.y[i]]))
    vs = float(max(2.0, ego.speed_mps[i] - rng.uniform(3.0, 6.0)))
    s = s_p + EGO_CENTER_OFFSET_X_M + vs * (TIME_GRID_S - TIME_GRID_S[i])
    cat = _vehicle_class(rng, [0.7, 0.18, 0.07, 0.05])
    return _track_on_route(cat, _size(rng, cat), "overtake", route, s,
                           details={"pass_time_s": round(float(TIME_GRID_S[i]), 3)})


def _time_shifted_route_track(rng, category, size, scenario, route, v_cruise, t_target, s_target, lateral=0.0,
                              **kw):
    """Simulate on a long grid, then shift time so the agent is at ``s_target`` at ``t_target``."""
    t_ext = np.round(np.arange(-40.0, 60.0 + 1e-9, DT_S), 6)
    s, v = simulate_longitudinal(route, t_ext, -400.0, np.full(len(t_ext), v_cruise))
    t_hit = float(np.interp(s_target, s, t_ext))
    shift = t_hit - t_target
    s_grid = np.interp(TIME_GRID_S + shift, t_ext, s)
    return _track_on_route(category, size, scenario, route, s_grid, lateral, **kw)


def _path_divergence(rng, ego):
    t = TIME_GRID_S
    # when does the ego reach the intersection entry (s = -13)?
    if ego.s[0] > -STOP_LINE_U_M or ego.s[-1] < -STOP_LINE_U_M:
        return None
    t_ego = float(np.interp(-STOP_LINE_U_M, ego.s, t))
    turns = {None: ["left", "right"], "left": [None, "right"], "right": [None, "left"]}[ego.route.turn]
    turn = turns[int(rng.integers(len(turns)))]
    lane = lane_for_turn(turn, rng)
    route = Route(ego.route.heading0_rad, lane, turn, turn_radius_m(turn))
    cat = _vehicle_class(rng, [0.8, 0.1, 0.0, 0.1])
    lead_s = float(rng.uniform(1.2, 3.5))
    tr = _time_shifted_route_track(rng, cat, _size(rng, cat), "path_divergence", route,
                                   float(rng.uniform(7.0, 12.0)), t_ego - lead_s, -STOP_LINE_U_M,
                                   details={"agent_turn": turn or "straight", "ego_turn": ego.route.turn or "straight",
                                            "intersection_time_s": round(t_ego - lead_s, 3)})
    return tr


def _pulling_away(rng, ego):
    moment = _ego_moment(rng, ego, 0.0, 12.0, vmin=3.0, in_lane=True)
    if moment is None:
        return None
    i, h0, lane_e, _ = moment
    route = Route(h0, lane_e, None)
    cat = _vehicle_class(rng, [0.8, 0.05, 0.0, 0.15])
    size = _size(rng, cat)
    s_e = route.project(np.array([ego.x[i], ego.y[i]]))
    gap = float(rng.uniform(7.0, 16.0))
    s0 = s_e + EGO_CENTER_OFFSET_X_M + EGO_SIZE_LWH_M[0] / 2 + gap + size[1] / 2
    v0 = float(ego.speed_mps[i])
    a = float(rng.uniform(1.2, 2.5))
    v1 = min(16.0, v0 + rng.uniform(4.0, 7.0))
    t0 = TIME_GRID_S[i]
    dtt = np.clip(TIME_GRID_S - t0, 0, None)
    t_acc = (v1 - v0) / a
    ds = np.where(dtt < t_acc, v0 * dtt + 0.5 * a * dtt ** 2, v0 * t_acc + 0.5 * a * t_acc ** 2 + v1 * (dtt - t_acc))
    s = s0 + np.where(TIME_GRID_S < t0, v0 * (TIME_GRID_S - t0), ds)
    return _track_on_route(cat, size, "pulling_away", route, s,
                           details={"accel_start_s": round(float(t0), 3), "accel_mps2": round(a, 3)})


def _maintain_state(rng, ego):
    cat = _vehicle_class(rng, [0.85, 0.1, 0.05, 0.0])
    size = _size(rng, cat)
    gap = float(rng.uniform(8.0, 20.0))
    ds = EGO_CENTER_OFFSET_X_M + EGO_SIZE_LWH_M[0] / 2 + gap + size[1] / 2
    s = ego.s + ds
    route = ego.route
    if route.arc_s is not None:
        in_arc = (s >= route.arc_s[0]) & (s <= route.arc_s[1])
        if in_arc.any() and (ego.speed_mps[in_arc] ** 2 / route.radius_m).max() > 4.0:
            return None
    return _track_on_route(cat, size, "maintain_state", route, s, ego.lateral_m, details={"gap_m": round(gap, 3)})


def _ped_class(rng):
    return "human.pedestrian.child" if rng.random() < 0.15 else "human.pedestrian.adult"


def _ped_crossing(rng, ego):
    """A pedestrian crossing the ego's road ahead of it (on the zebra crossing when the ego stops there)."""
    t = TIME_GRID_S
    stopped = np.nonzero(ego.speed_mps < 0.05)[0]
    cat = _ped_class(rng)
    size = _size(rng, cat)
    vp = float(rng.uniform(1.1, 1.7))
    direction = 1.0 if rng.random() < 0.5 else -1.0  # +1: from the ego's right to its left
    if len(stopped) and rng.random() < 0.8:
        h0 = ego.route.heading0_rad
        u = -float(rng.uniform(*CROSSWALK_U_M))
        t_mid = float(t[stopped[len(stopped) // 2]])
        v_mid = -direction * 3.5 + rng.uniform(-1.5, 1.5)  # where it is at mid-stop (ego lanes are v<0)
    else:
        moment = _ego_moment(rng, ego, 0.0, 18.0, vmin=1.0)
        if moment is None:
            return None
        i, h0, _, s_e = moment
        route = Route(h0, 0.0, None)
        s_e = route.project(np.array([ego.x[i], ego.y[i]]))
        u_ahead = float(rng.uniform(18.0, 40.0))
        # crossing point in the road frame with the road's along-axis u
        c, s_ = np.cos(h0), np.sin(h0)
        xc, yc, _ = route.pose(np.array([s_e + u_ahead]))
        u = float(xc[0] * c + yc[0] * s_)
        t_mid = float(t[i])
        v_mid = direction * rng.uniform(1.0, 6.0)  # already past the ego's lanes or on the far side
    # pedestrian path along the road-normal v at along-road u: v(t) = v_mid + direction * vp * (t - t_mid)
    v_lat = np.clip(v_mid + direction * vp * (t - t_mid), -PARK_HALF_M - 1.5, PARK_HALF_M + 1.5)
    c, s_ = np.cos(h0), np.sin(h0)
    x = u * c - v_lat * s_
    y = u * s_ + v_lat * c
    yaw = motion_yaw(x, y, np.full(len(t), h0 + direction * np.pi / 2))
    speed = np.hypot(np.gradient(x, DT_S), np.gradient(y, DT_S))
    return Track(cat, size, "ped_crossing", x, y, yaw, speed,
                 details={"cross_time_s": round(t_mid, 3), "direction": "right_to_left" if direction > 0 else
                          "left_to_right"})


def _cyclist_veering(rng, ego):
    moment = _ego_moment(rng, ego, 2.0, 17.0, vmin=2.0)
    if moment is None:
        return None
    i, h0, _, _ = moment
    same_dir = rng.random() < 0.7
    heading = h0 if same_dir else h0 + np.pi
    route = Route(heading, ROAD_HALF_M - 0.9, None)  # riding near the lane's right edge
    s_e = route.project(np.array([ego.x[i], ego.y[i]]))
    vc = float(rng.uniform(3.5, 6.0))
    ahead = float(rng.uniform(10.0, 35.0)) if same_dir else 0.0
    t_ref = TIME_GRID_S[i] if same_dir else TIME_GRID_S[i] + float(rng.uniform(-3, 3))
    if same_dir:
        s = s_e + ahead + vc * (TIME_GRID_S - t_ref)
    else:
        s = s_e + vc * (TIME_GRID_S - t_ref)
    t_v = float(np.clip(TIME_GRID_S[i] + rng.uniform(-2.0, 2.0), 1.0, 18.0))
    amp = float(rng.uniform(0.9, 1.8))
    dur = float(rng.uniform(1.5, 2.5))
    back = rng.random() < 0.6
    lateral = amp * smoothstep(TIME_GRID_S, t_v, dur)
    if back:
        lateral = lateral - amp * smoothstep(TIME_GRID_S, t_v + dur + rng.uniform(1.0, 3.0), dur)
    cat = "vehicle.bicycle" if rng.random() < 0.85 else "vehicle.motorcycle"
    return _track_on_route(cat, _size(rng, cat, ridden=True), "cyclist_veering", route, s, lateral,
                           details={"veer_time_s": round(t_v, 3), "veer_m": round(amp, 3), "returns": bool(back),
                                    "same_direction_as_ego": bool(same_dir)})


def _ego_nearby_road_point(rng, ego, ahead=(-20.0, 60.0)):
    """A point along the road the ego is on at a random time: (road heading, along-road u of the point)."""
    i = int(rng.integers(len(TIME_GRID_S)))
    h0, _, _ = _ego_road_at(ego, i)
    c, s = np.cos(h0), np.sin(h0)
    u_e = ego.x[i] * c + ego.y[i] * s
    return h0, float(u_e + rng.uniform(*ahead))


def _static_track(category, size, scenario, x, y, yaw, **kw):
    T = len(TIME_GRID_S)
    return Track(category, size, scenario, np.full(T, x), np.full(T, y), np.full(T, yaw), np.zeros(T), **kw)


def _road_xy(h0, u, v):
    c, s = np.cos(h0), np.sin(h0)
    return u * c - v * s, u * s + v * c


def _waiting_at_curb(rng, ego):
    cat = _ped_class(rng)
    size = _size(rng, cat)
    h0, u = _ego_nearby_road_point(rng, ego, (0.0, 50.0))
    if rng.random() < 0.5:  # at a zebra crossing
        u = float(np.sign(u or 1.0) * rng.uniform(PARK_HALF_M + 0.6, CROSSWALK_U_M[1]))
    side = 1.0 if rng.random() < 0.5 else -1.0
    v = side * (PARK_HALF_M + rng.uniform(0.4, 1.0))
    if abs(u) < PARK_HALF_M + 0.6:  # that would be on the cross road
        return None
    x, y = _road_xy(h0, u, v)
    yaw = h0 - side * np.pi / 2 + rng.uniform(-0.3, 0.3)
    tr = _static_track(cat, size, "waiting_at_curb", x, y, yaw)
    tr.yaw = tr.yaw + 0.05 * np.sin(TIME_GRID_S * rng.uniform(0.5, 1.5))  # shifting weight, no translation
    return tr


def _parked(rng, ego):
    r = rng.random()
    cat = ("vehicle.car" if r < 0.8 else "vehicle.truck" if r < 0.9 else "vehicle.trailer" if r < 0.95
           else "vehicle.construction")
    size = _size(rng, cat)
    h0, u = _ego_nearby_road_point(rng, ego, (-30.0, 80.0))
    if abs(u) < SIDEWALK_HALF_M + 3.0 + size[1] / 2:
        return None
    side = 1.0 if rng.random() < 0.5 else -1.0
    v = side * (ROAD_HALF_M + (PARK_HALF_M - ROAD_HALF_M) / 2 + rng.uniform(-0.15, 0.15))
    x, y = _road_xy(h0, u, v)
    yaw = h0 + (np.pi if side > 0 else 0.0) + rng.uniform(-0.05, 0.05)
    return _static_track(cat, size, "parked", x, y, yaw, parked=True)


def _static_group(rng, ego) -> list[Track]:
    """A small works zone in the parking strip: a line of cones and a barrier, or a parked bicycle."""
    h0, u = _ego_nearby_road_point(rng, ego, (0.0, 70.0))
    if abs(u) < SIDEWALK_HALF_M + 8.0:
        return []
    side = 1.0 if rng.random() < 0.5 else -1.0
    out = []
    if rng.random() < 0.25:
        v = side * (PARK_HALF_M + rng.uniform(1.5, 3.0))
        x, y = _road_xy(h0, u, v)
        out.append(_static_track("vehicle.bicycle", _size(rng, "vehicle.bicycle", ridden=False), "static", x, y,
                                 h0 + rng.uniform(-0.3, 0.3) + np.pi / 2 * side, ridden=False))
        return out
    n = int(rng.integers(3, 7))
    gap = float(rng.uniform(1.8, 3.0))
    for k in range(n):
        v = side * (ROAD_HALF_M + 0.45)
        x, y = _road_xy(h0, u + k * gap, v)
        out.append(_static_track("movable_object.trafficcone", _size(rng, "movable_object.trafficcone"), "static",
                                 x, y, float(rng.uniform(-np.pi, np.pi))))
    if rng.random() < 0.8:
        v = side * (ROAD_HALF_M + 1.3)
        x, y = _road_xy(h0, u + n * gap + 1.0, v)
        out.append(_static_track("movable_object.barrier", _size(rng, "movable_object.barrier"), "static", x, y,
                                 h0 + rng.uniform(-0.05, 0.05)))  # long side across the strip
    return out


_GENERATORS = {
    "oncoming_pass": _oncoming_pass, "overtake": _overtake, "path_divergence": _path_divergence,
    "pulling_away": _pulling_away, "maintain_state": _maintain_state, "ped_crossing": _ped_crossing,
    "cyclist_veering": _cyclist_veering, "waiting_at_curb": _waiting_at_curb, "parked": _parked,
}


def script_agents(rng: np.random.Generator, ego: EgoScript) -> list[Track]:
    """Agents for one scene; each candidate is rejected when it would touch the ego or an accepted agent."""
    wanted = {
        "parked": int(rng.integers(3, 8)),
        "static": int(rng.integers(1, 3)),
        "maintain_state": int(rng.random() < 0.7),
        "pulling_away": int(rng.random() < 0.7),
        "path_divergence": int(rng.integers(1, 3)),
        "overtake": int(rng.integers(0, 2)) + int(bool(ego.plan["lane_changes"])),
        "oncoming_pass": int(rng.integers(2, 6)),
        "ped_crossing": int(rng.integers(1, 4)),
        "cyclist_veering": int(rng.integers(0, 3)),
        "waiting_at_curb": int(rng.integers(1, 4)),
    }
    accepted: list[Track] = []
    for scenario, count in wanted.items():
        for _ in range(count):
            for _attempt in range(12):
                if scenario == "static":
                    group = _static_group(rng, ego)
                    if group and not any(collides(g, ego, accepted) for g in group):
                        accepted.extend(group)
                        break
                    continue
                tr = _GENERATORS[scenario](rng, ego)
                if tr is None:
                    continue
                margin = 1.0 if tr.category.startswith("human") else 0.6
                if not collides(tr, ego, accepted, ego_margin=margin):
                    accepted.append(tr)
                    break
    return accepted


# ------------------------------------------------------------------------------------------- static world
BUILDING_COLORS = [(176, 164, 146), (150, 140, 130), (120, 118, 112), (168, 150, 120), (140, 128, 108),
                   (184, 178, 168), (110, 100, 92), (158, 150, 142)]


def script_statics(rng: np.random.Generator, ego: EgoScript) -> tuple[list[StaticBox], np.ndarray]:
    """Buildings along both roads around the ego's path, and poles on the sidewalks."""
    ext_lo = np.array([min(ego.x.min(), 0.0), min(ego.y.min(), 0.0)]) - 90.0
    ext_hi = np.array([max(ego.x.max(), 0.0), max(ego.y.max(), 0.0)]) + 90.0
    out: list[StaticBox] = []
    # road A runs along x (u = x, v = y); road B along y (u = y, v = -x)
    for road, h0, (u_lo, u_hi) in (("A", 0.0, (ext_lo[0], ext_hi[0])), ("B", np.pi / 2, (ext_lo[1], ext_hi[1]))):
        for side in (-1.0, 1.0):
            for sgn in (-1.0, 1.0):  # both halves of the road, away from the intersection
                hi = u_hi if sgn > 0 else -u_lo
                u = BUILDING_SETBACK_M + rng.uniform(0.0, 2.0)
                while u < hi:
                    length = float(rng.uniform(10.0, 35.0))
                    depth = float(rng.uniform(8.0, 18.0))
                    height = float(rng.uniform(5.0, 22.0))
                    setback = BUILDING_SETBACK_M + float(rng.uniform(0.0, 1.5))
                    uc = sgn * (u + length / 2)
                    vc = side * (setback + depth / 2)
                    x, y = _road_xy(h0, uc, vc)
                    color = BUILDING_COLORS[int(rng.integers(len(BUILDING_COLORS)))]
                    out.append(StaticBox(np.array([x, y, height / 2]), np.array([length, depth, height]), h0,
                                         color, float(rng.uniform(30, 60)), "building"))
                    u += length + (float(rng.uniform(2.0, 6.0)) if rng.random() < 0.4 else 0.3)
                u = SIDEWALK_HALF_M + rng.uniform(2.0, 10.0)
                while u < hi:
                    height = float(rng.uniform(4.0, 8.0))
                    x, y = _road_xy(h0, sgn * u, side * (PARK_HALF_M + 0.5))
                    out.append(StaticBox(np.array([x, y, height / 2]), np.array([0.3, 0.3, height]), h0,
                                         (90, 92, 96), 70.0, "pole"))
                    u += float(rng.uniform(18.0, 32.0))
    return out, np.stack([ext_lo, ext_hi])


def script_scene(seed: int, index: int) -> SceneScript:
    """The whole scripted scene ``index`` of dataset ``seed`` (pure function of the two)."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(index), 0x5EED]))
    ego = script_ego(rng)
    if is_pull_over_scene(index):
        ego = script_pull_over(np.random.default_rng(np.random.SeedSequence([int(seed), int(index), 0x9011])), ego)
    tracks = script_agents(rng, ego)
    statics, extent = script_statics(rng, ego)
    return SceneScript(seed=seed, index=index, ego=ego, tracks=tracks, statics=statics, local_extent_m=extent)
