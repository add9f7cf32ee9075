"""Ray for a command: joining a cluster or starting the embedded instance, with its security defaults named
once. ``check_ray`` says before anything is written whether Ray can be used as asked; ``ensure_ray`` connects.

Authentication: ``RAY_AUTH_MODE``, Ray's own variable (Ray reads any value but ``token`` as ``disabled``),
every value handled here:

    unset      token authentication. The embedded Ray makes its token in ``~/.ray/auth_token`` (Ray's default
               for a local instance); joining a cluster, the cluster's own mode, asked without a token first: a
               cluster that requires one gets the token Ray finds (``RAY_AUTH_TOKEN``, the file named by
               ``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``: Ray's order; Ray itself does this only for
               ``--address auto``), one without authentication is joined without, with a warning (a driver in
               token mode on it never gets its actors started)
    token      the same (case does not matter, as for Ray)
    disabled   no authentication: the embedded Ray only with ``ray.allow_unauthenticated: true`` in the config,
               and a warning on every run; joining a cluster, no token (a cluster that requires one refuses)
    other      refused (``off``, empty, ``false``, ...): Ray would run without authentication

The token itself is never logged, written into a run folder or its config, or put into a runtime environment:
Ray's processes read it from the environment or the file.

Network: the embedded Ray listens on 127.0.0.1 only (Ray's single-machine mode, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER
=0``: the node's address is the loopback one, so are all its ports), its metrics endpoint
(``--metrics-port``) included, unless ``--metrics-host 0.0.0.0`` asks for the metrics to be reachable from
other machines: Ray binds a node's ports to one address, so the whole instance then listens on every interface,
its control ports behind the token.

A cluster that cannot be joined is a ``ClusterError`` naming the address and the reason (unreachable,
authentication, version mismatch), found by ``probe_cluster`` in a second or two with Ray's own GCS client
(``ray.init`` would retry for 20-40 s and then raise an error that reads as a network or disk failure).
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import time

from generator.numerics import ray_env_vars
from schemas.config import PipelineConfig
from schemas.errors import ClusterError, InputError

log = logging.getLogger("drivegen.ray")

AUTH_MODE_VAR = "RAY_AUTH_MODE"
RAY_TOKEN_FILE = "~/.ray/auth_token"  # Ray's default token file (one per user)
AUTH_MODES = ("token", "disabled")  # the values of RAY_AUTH_MODE Ray knows
LOOPBACK = "127.0.0.1"
METRICS_HOSTS = (LOOPBACK, "0.0.0.0")  # Ray binds a node's ports to its address: loopback, or every interface
_SINGLE_MACHINE_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # 0: Ray's node address is 127.0.0.1 (ray_constants)
GCS_CONNECT_TIMEOUT_S = 10.0
# Ray's settings of the embedded instance. prestart_worker_first_driver: Ray starts num_cpus workers as the driver
# connects, before any task; a drivegen run's first work is Ray Data's two actors, which take worker slots above
# num_cpus, so Ray stops those idle workers a second later and starts new ones for the scenes' tasks (measured,
# 3 generated scenes on 2 CPUs, four pairs: 5-6 worker processes -> 3-4, the run's CPU time over every process
# 23.9 -> 22.2 s, wall 17.1 -> 16.3 s).
EMBEDDED_SYSTEM_CONFIG = {"prestart_worker_first_driver": False}


# ------------------------------------------------------------------------------------------ authentication
def auth_mode(cfg: PipelineConfig, joining: bool) -> str:
    """``token`` or ``disabled``: the authentication this command gives Ray, from ``RAY_AUTH_MODE`` (see the
    module's table). Raises an InputError for a value Ray does not know, and for ``disabled`` on an embedded Ray
    without ``ray.allow_unauthenticated: true``."""
    raw = os.environ.get(AUTH_MODE_VAR)
    if raw is None:
        return "token"
    mode = raw.lower()
    if mode not in AUTH_MODES:
        raise InputError(f"{AUTH_MODE_VAR}={raw!r} in the environment is not one of Ray's modes "
                         f"({', '.join(AUTH_MODES)}): Ray reads it as 'disabled' and would run without "
                         f"authentication. Unset it (token authentication, the token in {RAY_TOKEN_FILE}) or set "
                         f"{AUTH_MODE_VAR}=token"
                         + ("" if joining else f"; to run the embedded Ray without authentication, set "
                            f"{AUTH_MODE_VAR}=disabled and ray.allow_unauthenticated: true in the config"))
    if mode == "disabled" and not joining and not cfg.ray.allow_unauthenticated:
        raise InputError(f"{AUTH_MODE_VAR}={raw} in the environment turns off the token authentication of the embedded "
                         "Ray: anyone who reaches its ports could run code as you. Unset "
                         f"{AUTH_MODE_VAR} (the token is kept in {RAY_TOKEN_FILE}; delete that file to rotate it, Ray "
                         "writes a new one at its next start), run in-process with --local, or set "
                         "ray.allow_unauthenticated: true in the config to start it anyway")
    return mode


def token_source() -> str | None:
    """Where Ray would read its token (``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``'s file, ``~/.ray/auth_token``:
    Ray's order), or None when it has none. Names the place, never the token."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        return path
    default = os.path.expanduser(RAY_TOKEN_FILE)
    return default if os.path.isfile(default) and os.path.getsize(default) else None


def _set_auth_mode(mode: str | None) -> None:
    """Ray in this process (and its children) in ``mode`` (``token`` / ``disabled``; None: ``token`` when
    ``RAY_AUTH_MODE`` is unset), never given the token itself. Ray reads its config once per process: it is read
    again, as Ray's own switch to token mode does, and the token read afresh."""
    # ray: only where Ray runs (in-process runs and most commands never start it)
    from ray._raylet import AuthenticationTokenLoader, Config

    if mode is not None:
        os.environ[AUTH_MODE_VAR] = mode
    elif AUTH_MODE_VAR not in os.environ:
        os.environ[AUTH_MODE_VAR] = "token"
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _private_token() -> None:
    """Ray writes its token file readable by everyone on the machine (mode 0644): make it the user's alone."""
    path = os.path.expanduser(RAY_TOKEN_FILE)
    try:
        mode = os.stat(path).st_mode & 0o777
        if mode & 0o077:
            os.chmod(path, 0o600)
            log.info("Ray's token file %s was readable by others (mode %o): now 0600", path, mode)
    except OSError:
        pass


# ------------------------------------------------------------------------------------------ metrics port
def check_metrics_port(port: int, host: str = LOOPBACK) -> None:
    """Raise an InputError when the embedded Ray could not serve its metrics on ``host:port`` (a port outside
    1-65535, one in use, one this user may not open); Ray itself would wait for its agent for 45 s and fail
    without saying why."""
    if host not in METRICS_HOSTS:
        raise InputError(f"--metrics-host {host}: Ray serves metrics on 127.0.0.1 (this machine only) or 0.0.0.0 "
                         "(every interface); give one of them")
    if not 1 <= int(port) <= 65535:
        raise InputError(f"--metrics-port {port}: a TCP port is 1-65535")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Ray's HTTP server: TIME_WAIT is not "in use"
        try:
            s.bind((host, int(port)))
        except OSError as err:
            why = "is in use by another program" if err.errno == 98 else f"cannot be opened ({err.strerror})"
            raise InputError(f"--metrics-port {port}: port {port} on {host} {why}; choose another port (or leave "
                             "--metrics-port out: the run's metrics then stay on Ray's own port)") from None


# ------------------------------------------------------------------------------------------ joining a cluster
def probe_cluster(address: str) -> str:
    """The GCS address (host:port) of the cluster ``address`` names ('auto': ``RAY_ADDRESS``, else the cluster
    ``ray start --head`` started last on this machine, as Ray's address file says), checked to be joinable:
    something answers there, it takes this process's token (this process is left in the cluster's authentication
    mode: token, with the token Ray finds, or none for a cluster without authentication, with a warning), and its
    Ray and Python versions are this process's. Raises a ClusterError naming the address and the reason."""
    # ray: only where Ray runs (in-process runs and most commands never start it)
    from ray._common.usage.usage_constants import CLUSTER_METADATA_KEY
    from ray._private import services  # Ray's own address rules and GCS client
    from ray._private.ray_constants import KV_NAMESPACE_CLUSTER
    from ray._private.utils import check_version_info
    from ray._raylet import GcsClient
    from ray.exceptions import AuthenticationError

    if address.startswith("ray://"):  # Ray Client: its proxy checks the rest when ray.init connects
        _set_auth_mode("token" if AUTH_MODE_VAR not in os.environ and token_source() else None)
        _reachable(address, address[len("ray://"):])
        return address
    target = address
    if address == "auto":  # never Ray's fallback for 'auto', any GCS process found on the machine (another user's)
        # ray: only where Ray runs (in-process runs and most commands never start it)
        from ray._private.utils import read_ray_address

        target = os.environ.get("RAY_ADDRESS") or read_ray_address()
        if not target or target == "auto":
            raise ClusterError(address, "unreachable", "'auto' is the cluster `ray start --head` started last on this "
                                                       "machine, and there is none (nor a RAY_ADDRESS): start one, or "
                                                       "give HOST:PORT")
    try:
        gcs = services.canonicalize_bootstrap_address(target)
    except (ConnectionError, ValueError) as err:
        raise ClusterError(address, "unreachable", f"{err} (give HOST:PORT of the head node)") from None
    if gcs is None:
        raise ClusterError(address, "unreachable", "no cluster address ('local' is the embedded Ray: leave --address "
                                                   "out)")
    _reachable(address, gcs)
    asked = os.environ.get(AUTH_MODE_VAR)  # checked by auth_mode: unset, token or disabled (any case)
    try:
        # The cluster's own mode first, asked without a token: a driver must run in the mode of the cluster's
        # processes (in token mode on a cluster without authentication its actors never start).
        _set_auth_mode("disabled")
        try:
            client = GcsClient(address=gcs)
        except AuthenticationError:
            if (asked or "").lower() == "disabled" or token_source() is None:
                raise
            _set_auth_mode("token")
            client = GcsClient(address=gcs)
        metadata = client.internal_kv_get(CLUSTER_METADATA_KEY, namespace=KV_NAMESPACE_CLUSTER,
                                          timeout=GCS_CONNECT_TIMEOUT_S)  # the versions the head started with
    except AuthenticationError:
        raise ClusterError(address, "authentication", _auth_advice(gcs, asked)) from None
    except Exception as err:  # noqa: BLE001 - Ray's RpcError and kin: something answers, not a Ray GCS that works
        first = str(err).splitlines()[0][:200] if str(err) else ""
        raise ClusterError(address, "unreachable", f"{gcs} accepts connections but no Ray GCS answered there "
                                                   f"({type(err).__name__}: {first})") from None
    if metadata:
        try:
            check_version_info(json.loads(metadata), "the machine drivegen runs on", raise_on_mismatch=True)
        except Exception as err:  # noqa: BLE001 - Ray raises a plain RuntimeError naming both versions
            said = " ".join(str(err).split())
            raise ClusterError(address, "version mismatch", f"{said} Install the cluster's Ray and Python versions "
                                                            "here (or drivegen's on the cluster)") from None
    return gcs


def _reachable(address: str, host_port: str) -> None:
    host, _, port = host_port.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=GCS_CONNECT_TIMEOUT_S):
            pass
    except (OSError, ValueError) as err:
        why = getattr(err, "strerror", None) or str(err) or type(err).__name__
        raise ClusterError(address, "unreachable", f"nothing answers at {host_port} ({why}): check the address and "
                                                   f"that the head node runs (`ray status --address {host_port}`)"
                           ) from None


def _auth_advice(gcs: str, asked: str | None) -> str:
    """What to do when the cluster at ``gcs`` requires a token this process did not give or gave wrong
    (``asked``: ``RAY_AUTH_MODE`` as the user set it)."""
    source = token_source()
    if (asked or "").lower() == "disabled":
        return (f"the cluster requires Ray's token authentication and {AUTH_MODE_VAR}={asked} in the environment "
                f"gives no token: unset it or set {AUTH_MODE_VAR}=token")
    if source is None:
        return ("the cluster requires Ray's token authentication and this process has no token (none in "
                f"RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or {RAY_TOKEN_FILE}): copy the cluster's token (`ray "
                f"get-auth-token` on its head node) into {RAY_TOKEN_FILE} (mode 600) or into a file named by "
                "RAY_AUTH_TOKEN_PATH")
    return (f"the cluster refused the token from {source}: it is not the token of the cluster at {gcs}. Use the "
            f"cluster's own (`ray get-auth-token` on its head node) in {RAY_TOKEN_FILE} or RAY_AUTH_TOKEN_PATH")


# ------------------------------------------------------------------------------------------ before and at the start
def _cluster_address(cfg: PipelineConfig, address: str | None) -> str | None:
    return address or cfg.ray.address or os.environ.get("RAY_ADDRESS") or None


def check_ray(cfg: PipelineConfig, address: str | None = None, metrics_port: int | None = None,
              metrics_host: str = LOOPBACK) -> str | None:
    """Everything about Ray that can fail a command, checked before anything is written: the authentication mode
    (``auth_mode``), the metrics port (embedded Ray), and the cluster (``probe_cluster``). Raises an InputError
    (a ClusterError for a cluster). Returns the cluster's GCS address (None: the embedded Ray)."""
    address = _cluster_address(cfg, address)
    auth_mode(cfg, joining=bool(address))
    if address:
        if metrics_port:
            raise InputError("--metrics-port serves the embedded Ray's metrics; a cluster's are on each node's own "
                             "endpoint (`ray start --metrics-export-port`): leave --metrics-port out with --address")
        return probe_cluster(address)
    if metrics_port:
        check_metrics_port(metrics_port, metrics_host)
    return None


def oversubscribed(cfg: PipelineConfig, cores: int | None = None) -> str | None:
    """The warning an embedded Ray with more CPUs than the machine's ``cores`` deserves, else None."""
    cores = cores or os.cpu_count() or 1
    n = cfg.ray.num_cpus
    if not n or n <= cores:
        return None
    return (f"ray.num_cpus={n} on a machine with {cores} CPUs: Ray runs up to {n} scenes' tasks at once and they "
            f"share the {cores} cores (more memory, no more speed)")


@contextlib.contextmanager
def _single_machine(on: bool):
    """Ray's node address is 127.0.0.1 while Ray starts (every port of the instance on the loopback interface),
    then the process's setting as it was. Ray reads the variable once, at its import, into ``ray_constants``,
    which is set too (a test process imported Ray before)."""
    if not on:
        yield
        return
    saved = os.environ.get(_SINGLE_MACHINE_VAR)
    os.environ[_SINGLE_MACHINE_VAR] = "0"
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(_SINGLE_MACHINE_VAR, None)
        else:
            os.environ[_SINGLE_MACHINE_VAR] = saved
        constants = sys.modules.get("ray._private.ray_constants")
        if constants is not None:  # what Ray reads from the variable as it is now
            constants.ENABLE_RAY_CLUSTER = constants.env_bool(_SINGLE_MACHINE_VAR, not constants.IS_WINDOWS_OR_OSX)


def cluster_hosts() -> set[str]:
    """The addresses of the machines of the Ray cluster this process is connected to (its live nodes)."""
    import ray  # ray: only where Ray runs (in-process runs and most commands never start it)

    return {n.get("NodeManagerAddress") for n in ray.nodes() if n.get("Alive")}


def stop_ray(started: bool) -> None:
    """Disconnect from Ray when ``ensure_ray`` started or joined it for this command (``started``: what it
    returned); nothing otherwise."""
    if started:
        import ray  # ray: only where Ray runs (in-process runs and most commands never start it)

        ray.shutdown()


def ensure_ray(cfg: PipelineConfig, address: str | None = None, verbose: bool = False,
               metrics_port: int | None = None, metrics_host: str = LOOPBACK) -> bool:
    """Connect to Ray: ``address`` / ``cfg.ray.address`` / ``RAY_ADDRESS`` joins a running cluster (probed first:
    ``probe_cluster``), otherwise an embedded local Ray with ``cfg.ray.num_cpus`` CPUs (default: all), no
    dashboard, quiet logs, on 127.0.0.1 (see the module). ``metrics_port``: the embedded Ray's Prometheus
    endpoint on ``metrics_host:metrics_port`` (``generator.pipeline.metrics``). Every check of ``check_ray`` is
    made again (a command that did not call it fails here the same way). Returns True when this call started
    Ray (the caller shuts it down)."""
    address = _cluster_address(cfg, address)
    gcs = check_ray(cfg, address, metrics_port, metrics_host)
    with _single_machine(not address and metrics_host == LOOPBACK):
        import ray  # ray: only where Ray runs (in-process runs and most commands never start it)

        if ray.is_initialized():
            return False
        # every worker's numpy pinned as the driver's (generator.numerics): the same bytes on any worker
        common = dict(logging_level=logging.INFO if verbose else logging.WARNING, log_to_driver=verbose,
                      configure_logging=True, runtime_env={"env_vars": ray_env_vars()})
        if address:
            _join(address, gcs, common)
            return True
        warning = oversubscribed(cfg)
        if warning:
            log.warning("%s", warning)
        _set_auth_mode(None)  # unset: token, Ray's default for a local instance, said rather than assumed
        extra = {"_metrics_export_port": int(metrics_port)} if metrics_port else {}
        # address='local': always a new embedded instance, never another user's Ray found on this machine.
        # EMBEDDED_SYSTEM_CONFIG: no workers started ahead of the first task (see there)
        ray.init(address="local", num_cpus=cfg.ray.num_cpus or os.cpu_count(), include_dashboard=False, **common,
                 _system_config=dict(EMBEDDED_SYSTEM_CONFIG), **extra)
    _private_token()
    _log_embedded(metrics_port)
    return True


def settle_metrics(cfg: PipelineConfig, address: str | None) -> None:
    """A driver that joined a cluster (``address`` / ``cfg.ray.address`` / ``RAY_ADDRESS``; otherwise nothing to
    do), at the end of its run: wait one report interval of Ray's metrics
    (``metrics_report_interval_ms``, 10 s by default) so that the run's final counts reach the node's metrics
    endpoint, which outlives the driver. Ray reports a process's metrics periodically, never as it exits: without
    this the scenes finished in the run's last seconds never reach the cluster's Prometheus."""
    from ray._raylet import Config  # ray: only where Ray runs (in-process runs and most commands never start it)

    if not _cluster_address(cfg, address):
        return
    wait_s = Config.metrics_report_interval_ms() / 1000
    log.info("waiting %.0f s for Ray to report the run's final metrics to the cluster", wait_s)
    time.sleep(wait_s)


def _join(address: str, gcs: str, common: dict) -> None:
    """``ray.init`` on the probed cluster (``gcs``), its failures named as ``probe_cluster`` names them."""
    import ray  # ray: only where Ray runs (in-process runs and most commands never start it)
    from ray.exceptions import AuthenticationError

    try:
        ray.init(address=gcs, **common)
    except AuthenticationError:  # the probe passed and then the cluster changed: the same errors, named
        raise ClusterError(address, "authentication", _auth_advice(gcs, os.environ.get(AUTH_MODE_VAR))) from None
    except ConnectionError as err:
        raise ClusterError(address, "unreachable", str(err).splitlines()[0][:300]) from None
    except RuntimeError as err:
        if "version mismatch" not in str(err).lower():
            raise
        raise ClusterError(address, "version mismatch", str(err).strip()) from None
    # ray: only where Ray runs (in-process runs and most commands never start it)
    from ray._raylet import AuthenticationMode, get_authentication_mode

    where = address if address == gcs else f"{address} ({gcs})"
    if get_authentication_mode() == AuthenticationMode.TOKEN:
        log.info("joined the Ray cluster at %s (token authentication, the token from %s)", where, token_source())
    else:
        log.warning("joined the Ray cluster at %s without a token: it runs without authentication, so anyone who "
                    "reaches its ports can run code on it (start its nodes with RAY_AUTH_MODE=token)", where)


def _log_embedded(metrics_port: int | None) -> None:
    """What the embedded Ray actually is, read back from Ray (never what was asked for)."""
    import ray  # ray: only where Ray runs (in-process runs and most commands never start it)
    from ray._raylet import AuthenticationMode, get_authentication_mode

    host = ray.util.get_node_ip_address()
    where = "127.0.0.1 only" if host == LOOPBACK else f"every interface ({host})"
    if get_authentication_mode() == AuthenticationMode.TOKEN:
        log.info("embedded Ray on %s, with token authentication: the token is in %s (delete it to rotate)", where,
                 RAY_TOKEN_FILE)
    else:
        log.warning("the embedded Ray on %s runs WITHOUT authentication (%s=%s, ray.allow_unauthenticated: true): "
                    "anyone who reaches its ports%s may run code as you", where, AUTH_MODE_VAR,
                    os.environ.get(AUTH_MODE_VAR), " (every user of this machine)" if host == LOOPBACK else "")
    if metrics_port:
        shown = LOOPBACK if host == LOOPBACK else "0.0.0.0"
        log.info("live metrics (Prometheus): http://%s:%d/metrics%s", shown, metrics_port,
                 "" if host == LOOPBACK else " (every interface, no authentication)")
