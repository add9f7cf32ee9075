"""A real S3-compatible server for object-storage tests: moto's server mode on 127.0.0.1 (``moto[server]``,
a test dependency), started once per test run. pyarrow's ``FileSystem.from_uri("s3://...")`` and every
process started later (Ray workers, the CLI) reach it through the standard AWS environment variables the
fixture sets (``AWS_ENDPOINT_URL`` etc.)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class S3Server:
    endpoint: str  # http://127.0.0.1:PORT
    env: dict  # the AWS variables that point clients at it

    def filesystem(self):
        import pyarrow.fs as pafs

        return pafs.S3FileSystem(endpoint_override=self.endpoint.split("://", 1)[1], scheme="http",
                                 access_key=self.env["AWS_ACCESS_KEY_ID"], secret_key=self.env["AWS_SECRET_ACCESS_KEY"],
                                 region=self.env["AWS_DEFAULT_REGION"], allow_bucket_creation=True,
                                 allow_bucket_deletion=True)

    def new_bucket(self, prefix: str = "drivegen") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.filesystem().create_dir(name)
        return name

    def upload(self, local: Path, uri: str) -> None:
        """Copy a local folder to ``s3://bucket/prefix`` (``pyarrow.fs.copy_files``)."""
        import pyarrow.fs as pafs

        pafs.copy_files(str(local), uri.removeprefix("s3://"), source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=self.filesystem())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    exe = Path(sys.executable).with_name("moto_server")
    if not exe.exists():
        pytest.fail(f"{exe} is missing: moto[server] is a test dependency (pip install -e '.[test]')")
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=fh, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=1).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() - t0 > 30:
                proc.kill()
                pytest.fail(f"moto_server did not start on {endpoint}: {log.read_text()[-2000:]}")
            time.sleep(0.2)
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield S3Server(endpoint, env)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
