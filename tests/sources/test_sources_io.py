"""LiDAR and image readers: frame conventions and specific errors for broken files."""
from __future__ import annotations

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pytest

from generator.geometry import SE3, quat_wxyz_to_matrix
from generator.sources.io import image_shape, load_image, load_lidar_ego
from generator.types import CameraCalib, Frame, SourceError
from schemas.config import SourceLimitsConfig


# frame-convention tests read a handful of points, not a whole revolution: completeness checks off
PARTIAL_SWEEPS_OK = SourceLimitsConfig(min_lidar_azimuth_coverage=0.0, lidar_rings=0)


def make_frame(lidar_path, fmt="nuscenes_bin", ego_SE3_lidar=None, image=None, size=(64, 48), limits=None):
    cam = CameraCalib("CAM_FRONT", np.array([[50.0, 0, 32], [0, 50.0, 24], [0, 0, 1]]),
                      SE3(quat_wxyz_to_matrix(np.array([0.5, -0.5, 0.5, -0.5])), np.zeros(3)), *size)
    return Frame(scene_id="scene-x", frame_index=3, timestamp_us=1_000_000, token="tok", city_SE3_ego=SE3.identity(),
                 ego_SE3_lidar=ego_SE3_lidar or SE3.identity(), lidar_path=str(lidar_path), lidar_format=fmt,
                 cameras={"CAM_FRONT": cam}, image_paths={"CAM_FRONT": str(image) if image else ""}, limits=limits)


def write_bin(path, pts5):
    np.asarray(pts5, dtype=np.float32).tofile(path)
    return path


def test_nuscenes_bin_goes_through_ego_SE3_lidar(tmp_path):
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(100, 5)).astype(np.float32)
    p = write_bin(tmp_path / "sweep.pcd.bin", pts)
    # the nuScenes LIDAR_TOP mounting: rotated -90 deg about z, 1.84 m up
    e = SE3(quat_wxyz_to_matrix(np.array([np.cos(-np.pi / 4), 0, 0, np.sin(-np.pi / 4)])), [0.94, 0.0, 1.84])
    out = load_lidar_ego(make_frame(p, ego_SE3_lidar=e, limits=PARTIAL_SWEEPS_OK))
    assert out.shape == (100, 4) and out.dtype == np.float32
    assert np.allclose(out[:, :3], e.transform_points(pts[:, :3]), atol=1e-5)
    assert np.allclose(out[:, 3], pts[:, 3])  # intensity kept, ring index dropped


def test_av2_feather_is_already_in_ego_frame(tmp_path):
    xyz = np.array([[1.0, 2.0, 3.0], [-4.0, 5.5, 0.25]], dtype=np.float16)
    t = pa.table({"x": xyz[:, 0], "y": xyz[:, 1], "z": xyz[:, 2], "intensity": np.array([7, 200], np.uint8),
                  "laser_number": np.array([1, 2], np.uint8), "offset_ns": np.array([0, 5], np.int32)})
    feather.write_feather(t, tmp_path / "1.feather")
    out = load_lidar_ego(make_frame(tmp_path / "1.feather", fmt="av2_feather", limits=PARTIAL_SWEEPS_OK,
                                    ego_SE3_lidar=SE3(np.eye(3), [9.0, 9.0, 9.0])))  # ignored: already ego
    assert out.dtype == np.float32 and np.allclose(out, [[1, 2, 3, 7], [-4, 5.5, 0.25, 200]])


def test_missing_lidar_names_scene_and_file(tmp_path):
    with pytest.raises(SourceError) as e:
        load_lidar_ego(make_frame(tmp_path / "absent.pcd.bin"))
    assert e.value.scene == "scene-x" and e.value.file.endswith("absent.pcd.bin") and "missing" in str(e.value)


def test_truncated_lidar(tmp_path):
    p = write_bin(tmp_path / "t.pcd.bin", np.zeros((10, 5)))
    data = p.read_bytes()
    p.write_bytes(data[:-6])
    with pytest.raises(SourceError, match="truncated") as e:
        load_lidar_ego(make_frame(p))
    assert e.value.file == str(p) and "194 bytes" in str(e.value)


def test_nan_points_are_refused(tmp_path):
    pts = np.zeros((5, 5))
    pts[2, 1] = np.nan
    with pytest.raises(SourceError, match="1 points with NaN"):
        load_lidar_ego(make_frame(write_bin(tmp_path / "n.pcd.bin", pts)))


def test_corrupt_av2_feather(tmp_path):
    p = tmp_path / "2.feather"
    p.write_bytes(b"ARROW1\x00\x00 not really")
    with pytest.raises(SourceError, match="unreadable AV2 LiDAR feather") as e:
        load_lidar_ego(make_frame(p, fmt="av2_feather"))
    assert e.value.scene == "scene-x"
    feather.write_feather(pa.table({"x": [1.0], "y": [2.0]}), tmp_path / "3.feather")  # no z/intensity
    with pytest.raises(SourceError, match="unreadable AV2 LiDAR feather"):
        load_lidar_ego(make_frame(tmp_path / "3.feather", fmt="av2_feather"))


def test_unknown_lidar_format(tmp_path):
    with pytest.raises(SourceError, match="unknown lidar_format 'pcd'"):
        load_lidar_ego(make_frame(write_bin(tmp_path / "a.pcd.bin", np.zeros((1, 5))), fmt="pcd"))


def test_image_reads_bgr_and_checks_calibrated_size(tmp_path):
    img = np.zeros((48, 64, 3), np.uint8)
    img[..., 2] = 255  # red in BGR order
    cv2.imwrite(str(tmp_path / "ok.png"), img)
    out = load_image(make_frame(tmp_path / "x.bin", image=tmp_path / "ok.png"), "CAM_FRONT")
    assert out.shape == (48, 64, 3) and out.dtype == np.uint8 and (out[..., 2] == 255).all() and out[..., 0].max() == 0
    assert image_shape(make_frame(tmp_path / "x.bin", image=tmp_path / "ok.png"), "CAM_FRONT") == (48, 64)
    cv2.imwrite(str(tmp_path / "small.png"), img[:40])
    for read in (load_image, image_shape):
        with pytest.raises(SourceError, match="64x40 px but its calibration says 64x48") as e:
            read(make_frame(tmp_path / "x.bin", image=tmp_path / "small.png"), "CAM_FRONT")
        assert e.value.file.endswith("small.png") and e.value.scene == "scene-x"


@pytest.mark.parametrize("read", [load_image, image_shape])
def test_image_errors(tmp_path, read):
    """Both readers refuse the same files: the pixels' reader and the header's (``image_shape``)."""
    (tmp_path / "junk.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    with pytest.raises(SourceError, match="unreadable"):
        read(make_frame(tmp_path / "x.bin", image=tmp_path / "junk.jpg"), "CAM_FRONT")
    (tmp_path / "junk.png").write_bytes(b"not an image at all")
    with pytest.raises(SourceError, match="not a decodable image"):
        read(make_frame(tmp_path / "x.bin", image=tmp_path / "junk.png"), "CAM_FRONT")
    with pytest.raises(SourceError, match="missing"):
        read(make_frame(tmp_path / "x.bin", image=tmp_path / "gone.jpg"), "CAM_FRONT")
    with pytest.raises(SourceError, match="no image for camera"):
        read(make_frame(tmp_path / "x.bin"), "CAM_FRONT")
    with pytest.raises(SourceError, match="no calibration for camera 'CAM_BACK'"):
        read(make_frame(tmp_path / "x.bin", image=tmp_path / "junk.jpg"), "CAM_BACK")


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_image_shape_turns_as_opencv_does(tmp_path, orientation):
    """A JPEG whose EXIF orientation turns it by 90 degrees (6, 8) is decoded by OpenCV with width and height
    swapped; the header's reader swaps them too (1, 3: no swap)."""
    from PIL import Image

    path = tmp_path / f"o{orientation}.jpg"
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.new("RGB", (48, 64)).save(path, exif=exif)  # stored 48 wide, 64 high
    want = cv2.imread(str(path), cv2.IMREAD_COLOR).shape[:2]
    assert want == ((48, 64) if orientation in (6, 8) else (64, 48))
    assert image_shape(make_frame(tmp_path / "x.bin", image=path, size=want[::-1]), "CAM_FRONT") == want


def test_a_pose_whose_rotation_is_no_rotation_is_refused():
    """SE3 refuses what np.allclose(R R^T, I, atol=1e-4) or det R < 0 refuses, and only that: a reflection, a
    scaled or sheared matrix, entries off by more than the tolerance; rotations within it pass, and the
    inverse and product of checked poses (built without the checks) are rotations too."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        q = rng.normal(size=4)
        R = quat_wxyz_to_matrix(q / np.linalg.norm(q))
        noise = rng.normal(0, rng.choice([1e-6, 3e-5, 1e-4, 1e-3]), (3, 3))
        for M in (R, R + noise, R @ np.diag([1.0, 1.0, -1.0]), 1.01 * R):
            ok = np.allclose(M @ M.T, np.eye(3), atol=1e-4) and np.linalg.det(M) >= 0
            if ok:
                pose = SE3(M, np.ones(3))
                both = pose.compose(pose.inverse())
                assert np.allclose(both.rotation, np.eye(3), atol=1e-3) and np.allclose(both.translation, 0, atol=1e-3)
            else:
                with pytest.raises(ValueError, match="orthonormal"):
                    SE3(M, np.ones(3))


def test_sweep_gaps_gives_the_answer_of_every_point(monkeypatch):
    """``sweep_gaps`` looks at every n-th point first and passes a sweep whose sample is complete: the answer
    (None or the message) must be that of all the points, for sweeps complete, cut in a sector, missing rings
    or sparse at the threshold."""
    from generator.sources import io

    rng = np.random.default_rng(5)
    limits = SourceLimitsConfig(min_lidar_azimuth_coverage=0.9, lidar_rings=32)
    answers = []
    for k in range(60):
        n = int(rng.integers(5_000, 40_000))
        az = rng.uniform(-np.pi, np.pi, n)
        if k % 3 == 1:  # cut: a sector lost
            az = az[(az < np.pi - rng.uniform(0, 1.0))]
        if k % 5 == 2:  # sparse: a few hundred points, bins near the threshold
            az = az[:int(rng.integers(300, 700))]
        if k % 2 == 0:  # a sector with one point per bin: the sample misses most of them, all the points do not
            sector = int(rng.integers(20, 60))
            az = np.r_[az[az < np.pi - np.radians(sector)], np.pi - np.radians(np.arange(sector) + 0.5)]
        ring = rng.integers(0, 32 if k % 4 else 30, len(az)).astype(np.float32)
        if k % 8 == 4:  # rings 30 and 31 on a point each
            ring[rng.integers(0, len(az), 2)] = [30, 31]
        xy = np.column_stack([np.cos(az), np.sin(az)]).astype(np.float32) * rng.uniform(2, 60, (len(az), 1))
        sampled = io.sweep_gaps(xy, ring, limits)
        with monkeypatch.context() as m:
            m.setattr(io, "_SAMPLE_POINTS", 10 ** 9)
            assert sampled == io.sweep_gaps(xy, ring, limits)
        answers.append(sampled is None)
    assert any(answers) and not all(answers)  # both answers came up
