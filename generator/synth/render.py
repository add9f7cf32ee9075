"""Camera images of the scripted geometry through the nuScenes rig (OpenCV rasterisation).

Layers, back to front: sky and pavement background (per camera, precomputed), carriageways, paint,
buildings (far to near), then poles and agents together (far to near, painter's order). A box is drawn
as its camera-facing faces, each shaded by its orientation to a fixed sun, with a class texture
(windows, heads, reflective bands) and dark edges. Faces crossing the near plane are clipped in 3D.
Each class has its own base colour (``CLASS_COLORS_RGB``); shading only scales it, so the hue of an
object's pixels identifies its class.
"""
from __future__ import annotations

import cv2
import numpy as np

from generator.geometry import box_corners
from generator.types import CameraCalib
from generator.synth.roads import WHITE, YELLOW, marking_quads, road_polygons

CLASS_COLORS_RGB = {
    "vehicle.car": (200, 30, 30),
    "vehicle.truck": (30, 80, 220),
    "vehicle.bus.rigid": (235, 195, 20),
    "vehicle.trailer": (120, 70, 30),
    "vehicle.construction": (140, 190, 20),
    "human.pedestrian.adult": (210, 40, 200),
    "human.pedestrian.child": (255, 110, 210),
    "vehicle.motorcycle": (110, 40, 220),
    "vehicle.bicycle": (0, 190, 210),
    "movable_object.trafficcone": (255, 110, 0),
    "movable_object.barrier": (225, 225, 225),
}
SKY_TOP_RGB, SKY_HORIZON_RGB = np.array([90, 140, 210]), np.array([190, 210, 230])
PAVEMENT_RGB = np.array([150, 148, 142])
ASPHALT_RGB = (62, 62, 66)
PAINT_RGB = {WHITE: (225, 225, 220), YELLOW: (220, 180, 40)}
SUN = np.array([0.4, 0.3, 0.87]) / np.linalg.norm([0.4, 0.3, 0.87])
NEAR_M = 0.3

# faces of geometry.box_corners: corners 0-3 top (FL, FR, BR, BL), 4-7 bottom; listed as
# (top edge a, top edge b, bottom b, bottom a) for the sides, so (u, v) texture coordinates are well defined
FACES = np.array([[0, 1, 5, 4], [2, 3, 7, 6], [3, 0, 4, 7], [1, 2, 6, 5], [0, 1, 2, 3]])
FACE_NORMALS_BOX = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1]], dtype=np.float64)


def _bgr(rgb) -> tuple:
    return (int(rgb[2]), int(rgb[1]), int(rgb[0]))


def clip_near(poly_cam: np.ndarray, near: float = NEAR_M) -> np.ndarray:
    """Sutherland-Hodgman clip of a convex polygon (n, 3) in the camera frame against z >= near."""
    out = []
    n = len(poly_cam)
    for i in range(n):
        a, b = poly_cam[i], poly_cam[(i + 1) % n]
        ina, inb = a[2] >= near, b[2] >= near
        if ina:
            out.append(a)
        if ina != inb:
            t = (near - a[2]) / (b[2] - a[2])
            out.append(a + t * (b - a))
    return np.array(out) if out else np.zeros((0, 3))


def _clip_halfplane(poly: np.ndarray, axis: int, bound: float, keep_below: bool) -> np.ndarray:
    out = []
    n = len(poly)
    for i in range(n):
        a, b = poly[i], poly[(i + 1) % n]
        ina = a[axis] <= bound if keep_below else a[axis] >= bound
        inb = b[axis] <= bound if keep_below else b[axis] >= bound
        if ina:
            out.append(a)
        if ina != inb:
            t = (bound - a[axis]) / (b[axis] - a[axis])
            out.append(a + t * (b - a))
    return np.array(out) if out else np.zeros((0, poly.shape[1]))


def clip_guard(uv: np.ndarray, W: int, H: int) -> np.ndarray:
    """Clip a convex pixel polygon (n, 2) to a guard band around the image so OpenCV's fixed-point
    rasteriser never sees huge coordinates; the visible part is unchanged."""
    for axis, lo, hi in ((0, -W, 2 * W), (1, -H, 2 * H)):
        if len(uv) and (uv[:, axis].min() < lo or uv[:, axis].max() > hi):
            uv = _clip_halfplane(uv, axis, lo, keep_below=False)
            if len(uv):
                uv = _clip_halfplane(uv, axis, hi, keep_below=True)
    return uv


class CameraRenderer:
    """Renders one camera of the rig; backgrounds are computed once per camera."""

    def __init__(self, cam: CameraCalib, noise_seed: int = 0):
        self.cam = cam
        W, H = cam.width_px, cam.height_px
        u, v = np.meshgrid(np.arange(W) + 0.5, np.arange(H) + 0.5)
        rays = np.stack([u, v, np.ones_like(u)], -1) @ np.linalg.inv(cam.K).T
        rays_ego = rays @ cam.ego_SE3_cam.rotation.T
        rays_ego /= np.linalg.norm(rays_ego, axis=-1, keepdims=True)
        elev = rays_ego[..., 2]
        sky_w = np.clip(elev / 0.5, 0, 1)[..., None]
        sky = SKY_HORIZON_RGB * (1 - sky_w) + SKY_TOP_RGB * sky_w
        # pavement gets lighter with distance (aerial haze)
        haze = np.clip(1.0 - (-elev) / 0.35, 0, 1)[..., None]
        ground = PAVEMENT_RGB * (1 - 0.25 * haze) + SKY_HORIZON_RGB * 0.25 * haze
        bg = np.where(elev[..., None] > 0, sky, ground)
        rng = np.random.default_rng(noise_seed)
        self.background = np.ascontiguousarray(bg[..., ::-1]).clip(0, 255).astype(np.uint8)
        self.noise_pos = rng.integers(0, 7, (H, W, 3), dtype=np.uint8)
        self.noise_neg = rng.integers(0, 7, (H, W, 3), dtype=np.uint8)

    def _to_cam(self, cam_SE3_frame, pts):
        return pts @ cam_SE3_frame.rotation.T + cam_SE3_frame.translation

    def _project(self, pc):
        uvw = pc @ self.cam.K.T
        return uvw[:, :2] / uvw[:, 2:3]

    def _fill(self, img, pc, color, lines=None):
        if np.any(pc[:, 2] < NEAR_M):
            pc = clip_near(pc)
            if len(pc) < 3:
                return
        uv = clip_guard(self._project(pc), self.cam.width_px, self.cam.height_px)
        if len(uv) < 3:
            return
        pts = np.round(uv * 4).astype(np.int32)
        cv2.fillPoly(img, [pts], color, lineType=cv2.LINE_8, shift=2)
        if lines is not None:
            cv2.polylines(img, [pts], True, lines, 1, cv2.LINE_8, shift=2)

    def render(self, frame_SE3_cam, statics, agents) -> np.ndarray:
        """One BGR uint8 image (H, W, 3).

        ``statics``: list of (center (3,), size lwh (3,), yaw, rgb, kind) for buildings/poles;
        ``agents``: list of (center (3,), size lwh (3,), yaw, category). Frame = the scene's local frame.
        """
        cam = self.cam
        W, H = cam.width_px, cam.height_px
        img = self.background.copy()
        cam_SE3_frame = frame_SE3_cam.inverse()
        cam_pos = frame_SE3_cam.translation
        for poly in road_polygons():
            self._fill(img, self._to_cam(cam_SE3_frame, poly), _bgr(ASPHALT_RGB))
        quads, paint = marking_quads(cam_pos[:2], 60.0)
        if len(quads):
            qc = self._to_cam(cam_SE3_frame, quads.reshape(-1, 3)).reshape(-1, 4, 3)
            ok = (qc[..., 2] > 1.0).all(axis=1)
            for code, rgb in PAINT_RGB.items():
                sel = ok & (paint == code)
                if sel.any():
                    uv = self._project(qc[sel].reshape(-1, 3)).reshape(-1, 4, 2)
                    inimg = ((uv[..., 0] > -W) & (uv[..., 0] < 2 * W) & (uv[..., 1] > -H) & (uv[..., 1] < 2 * H)).all(1)
                    if inimg.any():
                        cv2.fillPoly(img, list(np.round(uv[inimg] * 4).astype(np.int32)), _bgr(rgb), cv2.LINE_8, 2)
        # boxes: buildings first, then poles and agents, each group far to near
        items = []
        for c, s, yaw, rgb, kind in statics:
            items.append((0, c, s, yaw, rgb, kind))
        for c, s, yaw, cat in agents:
            items.append((1, c, s, yaw, CLASS_COLORS_RGB[cat], cat))
        if not items:
            return cv2.add(cv2.subtract(img, self.noise_neg), self.noise_pos)
        centers = np.array([it[1] for it in items])
        sizes = np.array([it[2] for it in items])
        yaws = np.array([it[3] for it in items])
        corners = box_corners(centers, sizes, yaws)  # (N, 8, 3)
        cc = self._to_cam(cam_SE3_frame, corners.reshape(-1, 3)).reshape(-1, 8, 3)
        front = cc[..., 2] > NEAR_M
        vis = front.any(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            uv = (cc @ cam.K.T)
            uv = uv[..., :2] / uv[..., 2:3]
        # frustum test on corners in front (conservative: boxes crossing the near plane are kept)
        full = front.all(axis=1)
        out_l = np.where(front, uv[..., 0] < 0, True).all(1)
        out_r = np.where(front, uv[..., 0] > W, True).all(1)
        out_t = np.where(front, uv[..., 1] < 0, True).all(1)
        out_b = np.where(front, uv[..., 1] > H, True).all(1)
        vis &= ~(full & (out_l | out_r | out_t | out_b))
        dist = np.linalg.norm(centers - cam_pos, axis=1)
        order = sorted(np.nonzero(vis)[0], key=lambda i: (items[i][0], -dist[i]))
        for i in order:
            layer, c, s, yaw, rgb, kind = items[i]
            cy, sy = np.cos(yaw), np.sin(yaw)
            Rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
            normals = FACE_NORMALS_BOX @ Rz.T  # (5, 3)
            face_pts = corners[i][FACES]  # (5, 4, 3)
            fc = face_pts.mean(axis=1)
            facing = np.einsum("fd,fd->f", normals, cam_pos - fc) > 0
            base = np.array(rgb, dtype=np.float64)
            for f in np.nonzero(facing)[0]:
                shade = 0.55 + 0.45 * max(0.0, float(normals[f] @ SUN))
                col = base * shade
                pc = cc[i][FACES[f]]
                self._fill(img, pc, _bgr(col), lines=_bgr(col * 0.45))
                if f < 4:
                    self._texture(img, pc, kind, col, f)
        return cv2.add(cv2.subtract(img, self.noise_neg), self.noise_pos)

    def _texture(self, img, pc, kind, col, face):
        """Decals on a side face: pc (4, 3) = (top a, top b, bottom b, bottom a) in the camera frame."""
        ta, tb, bb, ba = pc

        def quad(u0, u1, v0, v1):
            p = lambda u, v: ta + u * (tb - ta) + v * (ba - ta)
            return np.array([p(u0, v0), p(u1, v0), p(u1, v1), p(u0, v1)])

        if kind in ("vehicle.car", "vehicle.truck", "vehicle.bus.rigid", "vehicle.construction"):
            if kind == "vehicle.car":
                self._fill(img, quad(0.12, 0.88, 0.08, 0.42), _bgr(col * 0.35))
            elif kind == "vehicle.bus.rigid" and face >= 2:
                self._fill(img, quad(0.05, 0.95, 0.12, 0.45), _bgr(col * 0.35))
            elif face == 0:  # cab windscreen
                self._fill(img, quad(0.1, 0.9, 0.1, 0.4), _bgr(col * 0.35))
            self._fill(img, quad(0.0, 1.0, 0.85, 1.0), _bgr(col * 0.3))  # wheels/underbody band
        elif kind.startswith("human.pedestrian"):
            self._fill(img, quad(0.2, 0.8, 0.0, 0.14), _bgr(col * 0.5))  # head
            self._fill(img, quad(0.0, 1.0, 0.55, 1.0), _bgr(col * 0.6))  # legs
        elif kind == "movable_object.trafficcone":
            self._fill(img, quad(0.0, 1.0, 0.3, 0.45), _bgr((250, 250, 250)))
        elif kind == "movable_object.barrier" and face >= 2:
            for k in range(0, 6, 2):
                self._fill(img, quad(k / 6, (k + 1) / 6, 0.0, 0.6), _bgr((220, 30, 30)))
        elif kind in ("vehicle.bicycle", "vehicle.motorcycle"):
            self._fill(img, quad(0.0, 1.0, 0.6, 1.0), _bgr(col * 0.4))
