"""Camera images of the scripted geometry through the nuScenes rig (OpenCV rasterisation).

Layers, back to front: sky and pavement background (per camera, precomputed), carriageways, paint,
buildings (far to near), then poles and agents together (far to near, painter's order). A box is drawn
as its camera-facing faces, each shaded by its orientation to a fixed sun, with a class texture
(windows, heads, reflective bands) and dark edges. Faces crossing the near plane are clipped in 3D.
Each class has its own base colour (``CLASS_COLORS_RGB``); shading only scales it, so the hue of an
object's pixels identifies its class.
"""
from __future__ import annotations

import warnings

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
    for axis, lo, hi in ((0, -4 * W, 5 * W), (1, -4 * H, 5 * H)):
        if len(uv) and (uv[:, axis].min() < lo or uv[:, axis].max() > hi):
            uv = _clip_halfplane(uv, axis, lo, keep_below=False)
            if len(uv):
                uv = _clip_halfplane(uv, axis, hi, keep_below=True)
    return uv


def paint_order(footprints: np.ndarray, cam_xy: np.ndarray, rect: np.ndarray) -> list[int]:
    """Back-to-front drawing order of vertical boxes standing on the ground.

    footprints (N, 4, 2) ground rectangles, cam_xy (2,) camera position, rect (N, 4) image bounds
    (x1, y1, x2, y2). For two disjoint footprints some edge normal separates them; a box on the far side
    of that line from the camera cannot hide the near one, so it is drawn first. Only pairs whose image
    rectangles overlap are constrained; the rest, and any cycle, fall back to far-to-near by distance.
    """
    n = len(footprints)
    centre = footprints.mean(axis=1)
    dist = np.linalg.norm(centre - cam_xy, axis=1)
    if n <= 1:
        return list(range(n))
    edges = np.stack([footprints[:, 1] - footprints[:, 0], footprints[:, 2] - footprints[:, 1]], axis=1)  # (N,2,2)
    axes = edges / np.maximum(np.linalg.norm(edges, axis=-1, keepdims=True), 1e-9)
    proj = np.einsum("nad,mcd->nmac", axes, footprints)  # (N axes-owner, M boxes, 2 axes, 4 corners)
    pmin, pmax = proj.min(-1), proj.max(-1)  # (N, M, 2)
    pc = axes @ cam_xy  # (N, 2)
    # for the pair (i, j) try the axes of i and of j: arrays (N, N, 4)
    lo_i = np.concatenate([np.diagonal(pmin, axis1=0, axis2=1).T[:, None, :].repeat(n, 1),
                           pmin.transpose(1, 0, 2)], axis=2)
    hi_i = np.concatenate([np.diagonal(pmax, axis1=0, axis2=1).T[:, None, :].repeat(n, 1),
                           pmax.transpose(1, 0, 2)], axis=2)
    lo_j = np.concatenate([pmin, np.diagonal(pmin, axis1=0, axis2=1).T[None, :, :].repeat(n, 0)], axis=2)
    hi_j = np.concatenate([pmax, np.diagonal(pmax, axis1=0, axis2=1).T[None, :, :].repeat(n, 0)], axis=2)
    cam_ij = np.concatenate([pc[:, None, :].repeat(n, 1), pc[None, :, :].repeat(n, 0)], axis=2)
    sep_i_low = hi_i < lo_j  # i entirely below j on that axis
    sep_j_low = hi_j < lo_i
    # j drawn before i when j is beyond a separating line as seen from the camera
    j_first = (sep_i_low & (cam_ij < lo_j) & ~(cam_ij > hi_i)) | (sep_j_low & (cam_ij > hi_j) & ~(cam_ij < lo_i))
    overlap = (np.minimum(rect[:, None, 2], rect[None, :, 2]) > np.maximum(rect[:, None, 0], rect[None, :, 0])) & \
        (np.minimum(rect[:, None, 3], rect[None, :, 3]) > np.maximum(rect[:, None, 1], rect[None, :, 1]))
    before = j_first.any(axis=2) & overlap  # before[i, j]: j must be drawn before i
    np.fill_diagonal(before, False)
    before &= ~before.T | (dist[None, :] > dist[:, None])  # contradictory pairs: trust distance
    pending = before.sum(axis=1)
    done = np.zeros(n, dtype=bool)
    order = []
    far_first = np.argsort(-dist, kind="stable")
    for _ in range(n):
        ready = far_first[(pending[far_first] == 0) & ~done[far_first]]
        k = int(ready[0]) if len(ready) else int(far_first[~done[far_first]][0])
        order.append(k)
        done[k] = True
        pending -= before[:, k]
        pending[k] = 1 << 30
    return order


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

    def render(self, frame_SE3_cam, statics, agents, paint=None, truth: bool = False):
        """One BGR uint8 image (H, W, 3).

        ``statics``: list of (center (3,), size lwh (3,), yaw, rgb, kind) for buildings/poles;
        ``agents``: list of (center (3,), size lwh (3,), yaw, category). Frame = the scene's local frame.
        ``paint``: ``roads.marking_quads`` near the camera (computed here when None).
        ``truth``: also return an (H, W) uint8 label image of the visible face (``TRUTH_FACE``) and licence
        plate (``TRUTH_PLATE``) pixels (``TEXTURES``), 0 elsewhere: what anonymisation must blur.
        """
        cam = self.cam
        W, H = cam.width_px, cam.height_px
        img = self.background.copy()
        label = np.zeros((H, W), dtype=np.uint8) if truth else None
        finish = (lambda im: (im, label)) if truth else (lambda im: im)
        cam_SE3_frame = frame_SE3_cam.inverse()
        cam_pos = frame_SE3_cam.translation
        for poly in road_polygons():
            self._fill(img, self._to_cam(cam_SE3_frame, poly), _bgr(ASPHALT_RGB))
        quads, paint = marking_quads(cam_pos[:2], 60.0) if paint is None else paint
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
            return finish(cv2.add(cv2.subtract(img, self.noise_neg), self.noise_pos))
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
        vis_idx = np.nonzero(vis)[0]
        if not len(vis_idx):
            return finish(cv2.add(cv2.subtract(img, self.noise_neg), self.noise_pos))
        # image rectangles of the boxes (whole image for boxes crossing the near plane)
        u_in = np.where(front, uv[..., 0], np.nan)
        v_in = np.where(front, uv[..., 1], np.nan)
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            rect = np.stack([np.nanmin(u_in, 1), np.nanmin(v_in, 1), np.nanmax(u_in, 1), np.nanmax(v_in, 1)], 1)
        rect[~full] = [-np.inf, -np.inf, np.inf, np.inf]
        order = paint_order(corners[vis_idx, 4:, :2], cam_pos[:2], rect[vis_idx])
        order = [int(vis_idx[k]) for k in order]
        # camera-facing faces and their shading, for all boxes at once
        cyaw, syaw = np.cos(yaws), np.sin(yaws)
        nx = FACE_NORMALS_BOX[None, :, 0] * cyaw[:, None] - FACE_NORMALS_BOX[None, :, 1] * syaw[:, None]
        ny = FACE_NORMALS_BOX[None, :, 0] * syaw[:, None] + FACE_NORMALS_BOX[None, :, 1] * cyaw[:, None]
        nz = np.broadcast_to(FACE_NORMALS_BOX[None, :, 2], nx.shape)
        fc = corners[:, FACES].mean(axis=2)  # (N, 5, 3)
        to_cam = cam_pos - fc
        facing = nx * to_cam[..., 0] + ny * to_cam[..., 1] + nz * to_cam[..., 2] > 0
        shade = 0.55 + 0.45 * np.maximum(0.0, nx * SUN[0] + ny * SUN[1] + nz * SUN[2])
        guard = full & (uv[..., 0] > -4 * W).all(1) & (uv[..., 0] < 5 * W).all(1) & (uv[..., 1] > -4 * H).all(1) & \
            (uv[..., 1] < 5 * H).all(1)
        # per visible box (row r of the subset): face colours, pixel polygons (x4 fixed point), facing flags
        base_all = np.array([items[i][4] for i in order], dtype=np.float64)  # (n, 3) RGB
        face_rgb = base_all[:, None, :] * shade[order][:, :, None]  # (n, 5, 3)
        fill_bgr = np.round(face_rgb[..., ::-1]).astype(int).tolist()
        edge_bgr = np.round(face_rgb[..., ::-1] * 0.45).astype(int).tolist()
        face_polys = np.ascontiguousarray(
            np.round(np.where(guard[order][:, None, None], uv[order], 0.0) * 4).astype(np.int32)[:, FACES])
        facing_l = facing[order].tolist()
        for r, i in enumerate(order):
            kind = items[i][5]
            decals = _DECALS.get(kind, ())
            faces = [f for f in range(5) if facing_l[r][f]]
            if guard[i]:
                for f in faces:
                    poly = face_polys[r, f]
                    cv2.fillConvexPoly(img, poly, fill_bgr[r][f], cv2.LINE_8, 2)
                    cv2.polylines(img, [poly], True, edge_bgr[r][f], 1, cv2.LINE_8, 2)
                    if label is not None:  # a nearer box hides the faces and plates drawn before it
                        cv2.fillConvexPoly(label, poly, 0, cv2.LINE_8, 2)
                        cv2.polylines(label, [poly], True, 0, 1, cv2.LINE_8, 2)
                if decals:
                    quads, cols = self._decals(cc[i], faces, decals, base_all[r], shade[i])
                    if len(quads):
                        q = quads.reshape(-1, 3) @ cam.K.T
                        q = np.round(q[:, :2] / q[:, 2:3] * 4).astype(np.int32).reshape(-1, 4, 2)
                        for poly, col in zip(q, cols):
                            cv2.fillConvexPoly(img, poly, col, cv2.LINE_8, 2)
            else:  # crosses the near plane or the guard band: clip each polygon
                for f in faces:
                    self._fill(img, cc[i][FACES[f]], fill_bgr[r][f], lines=edge_bgr[r][f])
                    if label is not None:
                        self._fill(label, cc[i][FACES[f]], 0, lines=0)
                if decals:
                    quads, cols = self._decals(cc[i], faces, decals, base_all[r], shade[i])
                    for quad, col in zip(quads, cols):
                        self._fill(img, quad, col)
            for quad, tex, code in self._textures(cc[i], faces, kind, items[i][2]):
                self._paste(img, label, quad, tex, code)
        return finish(cv2.add(cv2.subtract(img, self.noise_neg), self.noise_pos))

    def _textures(self, cc, faces, kind, size_lwh):
        """(quad (4, 3) camera frame, corners in texture order TL, TR, BR, BL; texture; truth code) of the
        ``TEXTURES`` on the visible faces of one box. Seen from outside, a face's first top corner is on the
        viewer's right, so the texture's left edge goes to its second corner (text reads left to right)."""
        out = []
        for code, on_faces, half_w_m, z_top_m, z_bottom_m in TEXTURES.get(kind, ()):
            h = float(size_lwh[2])
            for f in faces:
                if f not in on_faces:
                    continue
                w = float(size_lwh[1] if f < 2 else size_lwh[0])
                u0, u1 = 0.5 - min(half_w_m / w, 0.48), 0.5 + min(half_w_m / w, 0.48)
                v0 = float(np.clip(1.0 - z_top_m / h if z_top_m > 0 else -z_top_m / h, 0, 1))
                v1 = float(np.clip(1.0 - z_bottom_m / h if z_bottom_m > 0 else -z_bottom_m / h, 0, 1))
                if v1 <= v0:
                    continue
                ta, tb, bb, ba = cc[FACES[f]]
                eu, ev = tb - ta, ba - ta
                pt = lambda u, v: ta + u * eu + v * ev
                out.append((np.array([pt(u1, v0), pt(u0, v0), pt(u0, v1), pt(u1, v1)]), _TEXTURE_IMAGES[code], code))
        return out

    def _paste(self, img, label, quad, tex, code):
        """Warp ``tex`` onto the camera-frame quad (skipped when it crosses the near plane) and mark its pixels
        ``code`` in ``label`` (when given)."""
        if (quad[:, 2] < NEAR_M).any():
            return
        uv = self._project(quad)
        W, H = self.cam.width_px, self.cam.height_px
        x1, y1 = np.floor(uv.min(0)).astype(int)
        x2, y2 = np.ceil(uv.max(0)).astype(int) + 1
        x1, y1, x2, y2 = max(x1, 0), max(y1, 0), min(x2, W), min(y2, H)
        if x2 - x1 < 1 or y2 - y1 < 1:
            return
        th, tw = tex.shape[:2]
        src = np.float32([[0, 0], [tw, 0], [tw, th], [0, th]])
        M = cv2.getPerspectiveTransform(src, (uv - [x1, y1]).astype(np.float32))
        warped = cv2.warpPerspective(tex, M, (x2 - x1, y2 - y1), flags=cv2.INTER_AREA)
        inside = cv2.warpPerspective(np.full((th, tw), 255, np.uint8), M, (x2 - x1, y2 - y1),
                                     flags=cv2.INTER_NEAREST) > 0
        img[y1:y2, x1:x2][inside] = warped[inside]
        if label is not None:
            label[y1:y2, x1:x2][inside] = code

    @staticmethod
    def _decals(cc, faces, decals, base, shade):
        """Texture quads (M, 4, 3) in the camera frame and their BGR colours for the visible side faces."""
        quads, cols = [], []
        for f in faces:
            if f >= 4:
                continue
            ta, tb, bb, ba = cc[FACES[f]]
            eu, ev = tb - ta, ba - ta
            for on_faces, (u0, u1, v0, v1), colour in decals:
                if f not in on_faces:
                    continue
                quads.append([ta + u0 * eu + v0 * ev, ta + u1 * eu + v0 * ev, ta + u1 * eu + v1 * ev,
                              ta + u0 * eu + v1 * ev])
                c = base * shade[f] * colour if np.isscalar(colour) else np.array(colour) * shade[f]
                cols.append(_bgr(c))
        return np.array(quads).reshape(-1, 4, 3), cols


_ALL, _FRONT, _SIDES, _ENDS = (0, 1, 2, 3), (0,), (2, 3), (0, 1)
_UNDER = (_ALL, (0.0, 1.0, 0.85, 1.0), 0.3)
# per class: (faces, (u0, u1, v0, v1) on the face, colour factor of the class colour or a fixed RGB)
_DECALS = {
    "vehicle.car": ((_ALL, (0.12, 0.88, 0.08, 0.42), 0.35), _UNDER),
    "vehicle.truck": ((_FRONT, (0.1, 0.9, 0.1, 0.4), 0.35), _UNDER),
    "vehicle.construction": ((_FRONT, (0.1, 0.9, 0.1, 0.4), 0.35), _UNDER),
    "vehicle.bus.rigid": ((_SIDES, (0.05, 0.95, 0.12, 0.45), 0.35), (_FRONT, (0.1, 0.9, 0.1, 0.45), 0.35), _UNDER),
    "vehicle.trailer": (_UNDER,),
    "human.pedestrian.adult": ((_ALL, (0.2, 0.8, 0.0, 0.14), 0.5), (_ALL, (0.0, 1.0, 0.55, 1.0), 0.6)),
    "human.pedestrian.child": ((_ALL, (0.2, 0.8, 0.0, 0.16), 0.5), (_ALL, (0.0, 1.0, 0.55, 1.0), 0.6)),
    "movable_object.trafficcone": ((_ALL, (0.0, 1.0, 0.3, 0.45), (250, 250, 250)),),
    "movable_object.barrier": tuple((_ENDS, (k / 6, (k + 1) / 6, 0.0, 0.6), (220, 30, 30)) for k in (0, 2, 4)),
    "vehicle.bicycle": ((_ALL, (0.0, 1.0, 0.6, 1.0), 0.4),),
    "vehicle.motorcycle": ((_ALL, (0.0, 1.0, 0.6, 1.0), 0.4),),
}


# Faces and licence plates painted where the 3D boxes say they are, so anonymisation can be measured against
# exact truth (``CameraRenderer.render(truth=True)``): a face-like pattern (skin oval, dark eyes and brows,
# nose, mouth) on the front of pedestrians' heads, a white plate with dark characters on the front and rear
# faces of vehicles (trailers: rear only). OpenCV's frontal-face and Russian-plate Haar cascades detect both
# patterns when they are large enough (tests/writers/test_anonymize.py).
TRUTH_FACE, TRUTH_PLATE = 1, 2


def _face_texture(w: int = 64, h: int = 80) -> np.ndarray:
    t = np.zeros((h, w, 3), np.uint8)
    t[:] = (60, 50, 40)  # BGR: dark hair around the oval
    cv2.ellipse(t, (w // 2, int(h * 0.55)), (int(w * 0.42), int(h * 0.42)), 0, 0, 360, (140, 170, 215), -1)
    ey, ex = int(h * 0.47), int(w * 0.22)
    for sx in (-1, 1):
        cv2.ellipse(t, (w // 2 + sx * ex, ey), (int(w * 0.11), int(h * 0.045)), 0, 0, 360, (40, 30, 30), -1)
        cv2.line(t, (w // 2 + sx * ex - int(w * 0.13), ey - int(h * 0.08)),
                 (w // 2 + sx * ex + int(w * 0.13), ey - int(h * 0.08)), (50, 40, 35), max(1, h // 30))
    cv2.line(t, (w // 2, ey), (w // 2 + 2, int(h * 0.66)), (110, 130, 170), max(1, w // 25))
    cv2.ellipse(t, (w // 2, int(h * 0.78)), (int(w * 0.15), int(h * 0.035)), 0, 0, 360, (60, 60, 150), -1)
    return t


def _plate_texture(w: int = 156, h: int = 34) -> np.ndarray:
    t = np.full((h, w, 3), 235, np.uint8)
    cv2.rectangle(t, (0, 0), (w - 1, h - 1), (20, 20, 20), 2)
    cv2.putText(t, "A123BC", (6, h - 8), cv2.FONT_HERSHEY_SIMPLEX, 0.85, (20, 20, 20), 2, cv2.LINE_AA)
    cv2.line(t, (int(w * 0.78), 2), (int(w * 0.78), h - 3), (20, 20, 20), 1)
    cv2.putText(t, "77", (int(w * 0.8), h - 12), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (20, 20, 20), 1, cv2.LINE_AA)
    return t


_TEXTURE_IMAGES = {TRUTH_FACE: _face_texture(), TRUTH_PLATE: _plate_texture()}
# per class: (truth code, faces, half width m, top, bottom); top/bottom > 0: metres above the box bottom,
# <= 0: metres below the box top (a face 0.22 x 0.26 m from 1 cm below the top of the head; a 0.52 x 0.12 m
# plate 0.44-0.56 m above the road)
_FACE = (TRUTH_FACE, _FRONT, 0.11, -0.01, -0.27)
_PLATE_ENDS = (TRUTH_PLATE, _ENDS, 0.26, 0.56, 0.44)
TEXTURES = {
    "human.pedestrian.adult": (_FACE,), "human.pedestrian.child": (_FACE,),
    "vehicle.car": (_PLATE_ENDS,), "vehicle.truck": (_PLATE_ENDS,), "vehicle.bus.rigid": (_PLATE_ENDS,),
    "vehicle.construction": (_PLATE_ENDS,), "vehicle.trailer": ((TRUTH_PLATE, (1,), 0.26, 0.56, 0.44),),
}
