"""A real S3-compatible server for object-storage tests: moto's server mode on 127.0.0.1 (``moto[server]``,
a test dependency), started once per test run. pyarrow's ``FileSystem.from_uri("s3://...")`` and every
process started later (Ray workers, the CLI) reach it through the standard AWS environment variables the
fixture sets (``AWS_ENDPOINT_URL`` etc.)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
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


class CuttableProxy:
    """A TCP proxy on 127.0.0.1 in front of an endpoint (the moto server), whose link can be cut and restored:
    ``cut()`` closes every connection and refuses new ones (an outage), ``restore()`` listens again on the same
    port. ``endpoint`` is what clients use instead of the server's."""

    def __init__(self, target: str):
        host, port = target.split("://", 1)[-1].rsplit(":", 1)
        self.target = (host, int(port))
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._hold: tuple[tuple[bytes, ...], float] | None = None
        self.denying = False  # answer every request as S3 answers wrong credentials (deny())
        self.held = threading.Event()  # set when a request matching ``hold_request`` arrived
        self._cut_at: tuple[tuple[bytes, ...], list[int]] | None = None
        self.was_cut = threading.Event()  # set when ``cut_at`` cut the link
        self.requests: list[str] = []  # "METHOD /path?query" of each request that went through, in order
        self.restore()

    def cut_at(self, *parts: bytes, after: int = 0) -> None:
        """Cut the link (``cut()``) when a request whose first bytes contain every one of ``parts`` arrives,
        after letting ``after`` such requests through: the outage comes at that request, whatever the timing."""
        self.was_cut.clear()
        self._cut_at = (parts, [after])

    def hold_request(self, *parts: bytes, seconds: float) -> None:
        """Delay by ``seconds`` the next request whose first bytes contain every one of ``parts`` (a write that
        is slow to land: a congested link), setting ``held`` as it arrives."""
        self.held.clear()
        self._hold = (parts, seconds)

    def restore(self) -> None:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", self.port))
        srv.listen(64)
        self._server = srv
        threading.Thread(target=self._accept, args=(srv,), daemon=True).start()

    def cut(self) -> None:
        srv, self._server = self._server, None
        if srv is not None:
            try:
                srv.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            except OSError:
                pass
            srv.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def deny(self, on: bool = True) -> None:
        """Answer every request with S3's reply to wrong credentials (403 InvalidAccessKeyId), as AWS does."""
        self.denying = on

    @staticmethod
    def _refuse(client: socket.socket) -> None:
        body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code><Message>The AWS '
                b'Access Key Id you provided does not exist in our records.</Message></Error>')
        try:
            client.settimeout(10)
            data = b""  # one request per connection: its headers are read, a body is dropped with the connection
            while b"\r\n\r\n" not in data:
                chunk = client.recv(1 << 16)
                if not chunk:
                    return
                data += chunk
            client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/xml\r\nConnection: close\r\n"
                           b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        except OSError:
            pass
        finally:
            client.close()

    def _accept(self, srv: socket.socket) -> None:
        while True:
            try:
                client, _ = srv.accept()
            except OSError:
                return
            if self.denying:
                threading.Thread(target=self._refuse, args=(client,), daemon=True).start()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b, out in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pipe, args=(a, b, out), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket, outbound: bool) -> None:
        try:
            while data := a.recv(1 << 16):
                if outbound and data[:8].split(b" ", 1)[0] in _METHODS:
                    self.requests.append(data.split(b"\r\n", 1)[0].rsplit(b" ", 1)[0].decode("latin-1"))
                at = self._cut_at if outbound else None
                if at is not None and all(p in data[:512] for p in at[0]):
                    if at[1][0] == 0:
                        self._cut_at = None
                        self.cut()
                        self.was_cut.set()
                        return
                    at[1][0] -= 1
                hold = self._hold if outbound else None
                if hold is not None and all(p in data[:512] for p in hold[0]):
                    self._hold = None
                    self.held.set()
                    time.sleep(hold[1])
                b.sendall(data)
        except OSError:
            pass
        finally:
            for c in (a, b):
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


_METHODS = {b"GET", b"HEAD", b"PUT", b"POST", b"DELETE"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto_server(log: Path) -> tuple[subprocess.Popen, str]:
    """moto's S3 server on a free port of 127.0.0.1, its request log in ``log``: (process, endpoint URL).
    RuntimeError naming the cause when it is not installed or does not answer within 30 s."""
    exe = Path(sys.executable).with_name("moto_server")
    if not exe.exists():
        raise RuntimeError(f"{exe} is missing: moto[server] is a test dependency (pip install -e '.[test]')")
    port = _free_port()
    with open(log, "wb") as fh:
        proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=fh, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=1).read()
            return proc, endpoint
        except OSError:
            if proc.poll() is not None or time.monotonic() - t0 > 30:
                proc.kill()
                raise RuntimeError(f"moto_server did not start on {endpoint}: {log.read_text()[-2000:]}") from None
            time.sleep(0.2)


# the credentials moto accepts, and the variables that point clients at a server
def moto_env(endpoint: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    try:
        proc, endpoint = start_moto_server(tmp_path_factory.mktemp("moto") / "moto.log")
    except RuntimeError as err:
        pytest.fail(str(err))
    env = moto_env(endpoint)
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
