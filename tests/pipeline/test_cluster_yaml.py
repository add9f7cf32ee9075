"""cluster.yaml is a valid Ray cluster-launcher config (Ray's own schema and checks) with the shape drivegen
needs: a CPU head, a GPU worker group, setup that installs drivegen and its GPU extras, object store and
spilling settings, and no port open to the world."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster() -> dict:
    return yaml.safe_load((REPO / "cluster.yaml").read_text())


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def test_validates_against_ray_schema(cluster):
    import jsonschema
    import ray.autoscaler
    from ray.autoscaler._private.util import prepare_config, validate_config

    schema = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())
    jsonschema.validate(cluster, schema)  # the file as written
    validate_config(prepare_config(copy.deepcopy(cluster)))  # after Ray merges its provider defaults


def test_schema_check_is_real(cluster):
    """The same validation refuses a broken variant (so the test above can fail)."""
    import jsonschema
    from ray.autoscaler._private.util import prepare_config, validate_config

    bad = copy.deepcopy(cluster)
    bad["available_node_types"]["worker.gpu"]["resources"]["GPU"] = "one"
    with pytest.raises(jsonschema.ValidationError):
        validate_config(prepare_config(bad))


def test_cpu_head_and_gpu_workers(cluster):
    types = cluster["available_node_types"]
    head = types[cluster["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0 and head["resources"]["CPU"] > 0
    gpu_types = [t for name, t in types.items() if name != cluster["head_node_type"] and t["resources"].get("GPU", 0) > 0]
    assert gpu_types and all(t["max_workers"] >= 1 for t in gpu_types)


def test_setup_installs_drivegen_and_gpu_extras(cluster):
    head = " ".join(cluster["setup_commands"] + cluster["head_setup_commands"])
    worker = " ".join(cluster["setup_commands"] + cluster["worker_setup_commands"])
    assert "~/drivegen" in head and "pip install" in head
    assert "drivegen[mmdet3d]" in worker and "sam2==1.1.0" in worker and "--no-build-isolation" in worker
    assert "libusb-1.0-0" in " ".join(cluster["setup_commands"])  # open3d needs it at import time
    assert "~/drivegen" in cluster["file_mounts"]


def test_object_store_and_spilling(cluster):
    head = " ".join(cluster["head_start_ray_commands"])
    assert "--object-store-memory" in head and "object_spilling_config" in head
    spill = json.loads(json.loads(head.split("--system-config='")[1].split("'")[0])["object_spilling_config"])
    assert spill["type"] == "filesystem" and spill["params"]["directory_path"]
    assert "--object-store-memory" in " ".join(cluster["worker_start_ray_commands"])


def test_no_port_open_to_the_world(cluster):
    # The launcher creates a security group with SSH from 0.0.0.0/0 for any node type without one.
    for name, t in cluster["available_node_types"].items():
        assert t["node_config"].get("SecurityGroupIds"), f"node type {name} would get a world-open SSH rule"
    values = list(_strings(cluster))
    assert not [v for v in values if "0.0.0.0" in v or "::/0" in v]
    assert "--dashboard-host=127.0.0.1" in " ".join(cluster["head_start_ray_commands"])


def test_token_authentication_on_every_node(cluster):
    """Ray 2.60 starts a node without authentication unless a token is there (head) or RAY_AUTH_MODE=token (a
    worker joining): the token is copied to every node, kept private, and every ``ray start`` asks for token mode."""
    assert cluster["file_mounts"].get("~/.ray/auth_token") == "~/.ray/auth_token"
    assert any("chmod 600 ~/.ray/auth_token" in c for c in cluster["setup_commands"])
    starts = [c for key in ("head_start_ray_commands", "worker_start_ray_commands") for c in cluster[key]
              if "ray start" in c]
    assert len(starts) == 2 and all("RAY_AUTH_MODE=token " in c for c in starts), starts
