"""Joining an existing Ray cluster, or starting a lean one on this machine for the length of a run.

A local run needs Ray's GCS and raylet, but not the API server (the dashboard's head, which
`ray.init(include_dashboard=False)` still starts for job submission and the state API), the autoscaler monitor nor
the log monitor: the first serves clients this run never has, the second scales clusters it does not have, the third
forwards workers' stdout to the driver, and our tasks report through their return values (their logs stay in Ray's
session folder). `ray.init` has no switch for these, so they are left out through Ray's node startup. Measured here
(2 cores): the monitors' 160 MiB and the API server's ~100 MiB saved, Ray stops in 0.1 s instead of 1.3 s.
The raylet also starts a dashboard agent and a runtime-env agent, waits for the ports they write and stops when one
exits; here they have nothing to do (metrics need `ray[default]`, and no local task has a runtime environment), so
curation/ray_agent_standin.py writes their port files instead: Ray starts in ~0.8 s instead of ~2 s, ~180 MiB less.
Ray's own wait for the raylet's registration sleeps a whole second when it is not there at the first look; it is
polled every 20 ms first. A cluster (`--ray-address`) is joined as it is: its nodes run Ray's own agents.
Workers also use the system allocator for Arrow unless told otherwise: a shard's tables live for one task, and
mimalloc kept ~30 MiB more per worker once they were freed, at the same speed.
"""

import hashlib
import importlib.util
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import psutil

from filters.packaged import cache_root

OBJECT_STORE_BYTES = 200 * 1024**2  # tasks pass file paths and small stats, never tables
RAYLET_START_WAIT_S = 30  # as Ray waits for its raylet to register
# No task events: they feed Ray's state API, dashboard and ray.timeline(), which a local run does not serve, and the
# driver's ray.shutdown() waited ~0.25 s on their last flush in 13 of 18 stops here (~0.01 s in 15 of 16 without)
LOCAL_SYSTEM_CONFIG = {"task_events_report_interval_ms": 0}
STAND_IN_CHECKED_ON = ("2.60",)  # Ray versions (major.minor) the agent stand-in was checked on: its start, tasks, refusal
PROBE_TIMEOUT_S = 5  # a cluster's GCS accepts a TCP connection at once; Ray itself waits minutes for one that never will
RAY_CLIENT_PORT = 10001  # of a ray:// address without one
CTRL_C_HELD_S = 10  # once a Ctrl-C has waited this long for Ray's start-up, another interrupts it; a quicker one waits


def check_address(address: str) -> None:
    """What can be told about `--ray-address` before trying it."""
    if address.startswith("ray://") and importlib.util.find_spec("grpc") is None:
        raise SystemExit(f"curate: --ray-address {address} uses Ray Client, which needs grpcio: "
                         "pip install 'pretrain-stack[cluster]' (or give the head's HOST:6379)")  # fmt: skip


def connect(address: str | None, num_cpus: int | None, owner: str) -> bool:
    """Join `address`, or start a local Ray for the run in `owner` (its folder); True when this call started one
    (the caller then stops it). A Ctrl-C meanwhile stops it once it has started (see `_ctrl_c_held`)."""
    with _ctrl_c_held() as held:
        started = _connect(address, num_cpus, owner)
    if held:
        disconnect(started, owner)
        raise KeyboardInterrupt
    return started


def _connect(address: str | None, num_cpus: int | None, owner: str) -> bool:
    import ray

    if ray.is_initialized():
        return False
    if address:
        import curation
        import filters
        import shard_contract

        check_address(address)
        _check_reachable(address)

        try:
            modules = [curation, filters, shard_contract]  # what a task imports: shipped to nodes without the project
            ray.init(address=address, runtime_env={"py_modules": modules}, logging_level=logging.WARNING)
        except Exception as error:  # unreachable, refused, or a token it does not accept: one line, not a traceback
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
            raise SystemExit(
                f"curate: could not join the Ray cluster at {address}: {reason}\n"
                "  (a cluster started with token authentication needs the same RAY_AUTH_MODE=token and RAY_AUTH_TOKEN "
                "in this shell as on its nodes)"
            ) from None
        return False
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")  # read by each worker's pyarrow at import
    # Ray (2.5x+) warns on every local start that it turned its default token authentication on; the default is kept,
    # the warning is not repeated on every `curate` command (a missing logger name only leaves the warning in place)
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    _stop_leftovers(owner)
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    try:
        with _lean_local_ray():
            ray.init(
                address="local",  # a cluster of its own, even when another was started here or RAY_ADDRESS is set
                num_cpus=num_cpus or os.cpu_count(),
                include_dashboard=False,
                object_store_memory=OBJECT_STORE_BYTES,
                logging_level=logging.WARNING,
                log_to_driver=False,
                _system_config=LOCAL_SYSTEM_CONFIG,
            )
    except BaseException as error:  # a half-started Ray would live as long as this process
        for child in psutil.Process().children(recursive=True):
            if child.pid not in before:
                child.kill()
        if isinstance(error, RayletGone):
            raise SystemExit(f"curate: {error}") from None
        raise
    _record_processes(owner)
    return True


def _check_reachable(address: str) -> None:
    """A TCP connection to the address Ray would dial (its `auto` and localhost resolved as Ray resolves them): a closed
    port, a host that is down or a name that does not resolve is one line within seconds, where ray.init retried for
    minutes printing `Failed to get cluster ID from GCS server`. A port that answers but is not Ray's is left to Ray."""
    if address.startswith("ray://"):
        parsed = urlsplit(address)
        target = (parsed.hostname, parsed.port or RAY_CLIENT_PORT)
    else:
        try:
            from ray._private.services import canonicalize_bootstrap_address

            host, port = canonicalize_bootstrap_address(address).rsplit(":", 1)
        except (ImportError, AttributeError, ValueError, ConnectionError):  # no running cluster for `auto`, a malformed
            return  # address, another Ray's internals: ray.init says what it makes of it
        target = (host.strip("[]"), int(port))
    try:
        socket.create_connection(target, timeout=PROBE_TIMEOUT_S).close()
    except OSError as error:
        reason = error.strerror or str(error) or type(error).__name__
        raise SystemExit(f"curate: no Ray cluster answers at --ray-address {address} ({target[0]}:{target[1]}: {reason}): "
                         "start it (`ray start --head`) or give its head's HOST:6379 or ray://HOST:10001") from None  # fmt: skip


@contextmanager
def _ctrl_c_held():
    """Ctrl-C while Ray is imported and started is recorded in the list this yields instead of raised. Raised inside
    ray.init (Ray's C++ core worker calls back into Python while it is built), it left that worker half built and the
    interpreter crashed at exit (SIGSEGV, exit 139: 5 of 5 tries here), or a callback swallowed it and the run went on;
    raised inside `import ray`, Ray's exit handler printed a traceback of its half-imported modules. Start-up takes
    0.8-2 s (3-4 s on a loaded machine); a Ctrl-C pressed again once the first has waited CTRL_C_HELD_S interrupts at
    once (a cluster that never answers). Only where Python's own handler is in place: an ignored SIGINT (a script's
    background job) stays ignored."""
    held = []
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield held
        return

    def hold(number, frame):
        if not held:
            held.append(time.monotonic())
        elif time.monotonic() - held[0] > CTRL_C_HELD_S:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, hold)
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def disconnect(started: bool, owner: str) -> None:
    """Stop the Ray this process started (at exit Ray would do it too, after an extra half-second pause)."""
    import ray

    if started:
        ray.shutdown()
        _record(owner).unlink(missing_ok=True)


def _record(owner: str) -> Path:
    """Where this machine keeps the processes of the local Ray that a run of `owner` started."""
    return cache_root() / "ray-sessions" / f"{hashlib.sha256(owner.encode()).hexdigest()[:16]}.json"


def _record_processes(owner: str) -> None:
    """This driver and Ray's processes, its children, with their start times (a pid alone may be reused)."""
    driver = psutil.Process()
    record = _record(owner)
    record.parent.mkdir(parents=True, exist_ok=True)
    processes = [[p.pid, p.create_time()] for p in driver.children(recursive=True)]
    record.write_text(json.dumps({"driver": [driver.pid, driver.create_time()], "processes": processes}))


def _alive(pid: int, started: float) -> psutil.Process | None:
    try:
        process = psutil.Process(pid)
        return process if abs(process.create_time() - started) < 1e-3 and process.status() != psutil.STATUS_ZOMBIE else None
    except psutil.Error:
        return None


def _stop_leftovers(owner: str) -> None:
    """A driver killed with SIGKILL could leave its Ray behind (Ray's own agents lived ~70 s here; the stand-ins, the
    raylet and its workers now die with it, but a process that outlives it still can): the next run of the same
    folder stops what is still alive of it, and says so. A Ray whose driver still runs (the same
    folder curated from another shell) is left alone."""
    record = _record(owner)
    if not record.is_file():
        return
    recorded = json.loads(record.read_text())
    if isinstance(recorded, list):  # a record written before the driver was part of it
        recorded = {"driver": None, "processes": recorded}
    if recorded["driver"] and _alive(*recorded["driver"]):
        return
    stopped = 0
    for pid, started in recorded["processes"]:
        process = _alive(pid, started)
        try:
            if process:
                process.kill()
                stopped += 1
        except psutil.Error:
            continue
    record.unlink(missing_ok=True)
    if stopped:
        print(f"curate: stopped {stopped} Ray process(es) left running by an earlier, killed run of {owner}", file=sys.stderr)


@contextmanager
def _lean_local_ray():
    """Ray's node startup without the monitors and the API server, with curation/ray_agent_standin.py in place of its
    two agents, and without the second Ray waits for a raylet that registers a moment after it first asks (see the
    module's docstring). Only on the Ray versions the stand-in's contract with the raylet (port files, -1 for "not
    available", HTTP to the runtime-env agent) was checked on; any other starts as ray.init does."""
    import ray

    try:
        import ray._private.utils
        from ray._private import node, parameter, ray_constants, services
        from ray._private.state import GlobalState

        targets = [(parameter.RayParams, "__init__"), (node.Node, "start_api_server"),
                   (services, "_build_python_executable_command_memory_profileable"), (services, "get_node"),
                   (ray._private.utils, "get_dashboard_dependency_error")]  # fmt: skip
        original = {name: getattr(owner, name) for owner, name in targets}  # a missing one: another Ray
        agents = {ray_constants.PROCESS_TYPE_DASHBOARD_AGENT, ray_constants.PROCESS_TYPE_RUNTIME_ENV_AGENT}
        options_of = services._get_gcs_client_options
        checked = ray.__version__.rsplit(".", 1)[0] in STAND_IN_CHECKED_ON
        checked &= {"no_monitor", "include_log_monitor"} <= set(original["__init__"].__code__.co_varnames)
    except (AttributeError, ImportError):
        checked = False
    if not checked:
        yield
        return

    def lean(self, *args, **kwargs):
        original["__init__"](self, *args, **kwargs)
        self.no_monitor, self.include_log_monitor = True, False

    def no_api_server(self, **_):
        self._webui_url = None

    def python_for(component, session_dir, unbuffered=True):
        """The agent's command line with our stand-in script before the agent's own, which it receives as argv[1]."""
        if component in agents:
            return [sys.executable, "-u", str(Path(__file__).with_name("ray_agent_standin.py"))]
        return original["_build_python_executable_command_memory_profileable"](component, session_dir, unbuffered)

    def get_node_once_registered(gcs_address, node_id):
        """Ray's get_node sleeps a whole second when the raylet has not registered yet, as it never has at first ask;
        a raylet that died says so at once instead of after Ray's 30 s of retries."""
        state = GlobalState()
        state._initialize_global_state(options_of(gcs_address))
        deadline, seen = time.monotonic() + RAYLET_START_WAIT_S, False
        try:
            while not any(n["NodeID"] == node_id and n["Alive"] for n in state.node_table()):
                alive = _raylet_alive()
                seen |= alive
                if (seen and not alive) or time.monotonic() > deadline:
                    what = "exited" if seen and not alive else "did not register"
                    raise RayletGone(f"Ray's raylet {what} at start-up: see raylet.err in Ray's session logs "
                                     "(/tmp/ray/session_latest/logs unless RAY_TMPDIR is set)")  # fmt: skip
                time.sleep(0.02)
        finally:
            state.disconnect()
        return original["get_node"](gcs_address, node_id)

    replacements = [lean, no_api_server, python_for, get_node_once_registered, lambda: None]
    # the last decides only the agent's --minimal flag, which the stand-in ignores; importing aiohttp for it took 0.25 s
    for (owner, name), replacement in zip(targets, replacements):
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        for owner, name in targets:
            setattr(owner, name, original[name])


def _raylet_alive() -> bool:
    """Whether a child of this process named raylet runs (one reaped while it is asked about does not)."""
    for child in psutil.Process().children():
        try:
            if child.name() == "raylet" and child.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            continue
    return False


class RayletGone(Exception):
    """Not a RuntimeError, which Ray's node start-up catches and retries for 30 s."""
