"""Launching and supervising one tritonserver: `TritonServer`.

    with TritonServer(repo, workdir=wd, auto_ports=True) as server:   # start + wait ready
        print(server.http_url)
    # stopped: SIGTERM, wait, SIGKILL the process group (Python backend stubs included)

Foreground: `server.start(); server.serve_forever()` returns on Ctrl-C / SIGTERM / SIGHUP
after a clean stop. Detached: `server.start(detach=True)` leaves it running after sdtk exits.
Either way a started server is recorded in `<workdir>/state.json` (removed by `stop`) for
`toolkit.server.state`: status / logs / stop from another shell.

The server's stdout and stderr always go to `<workdir>/logs/tritonserver.log`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, TextIO

from toolkit import log, runner
from toolkit.errors import ServerError, ToolNotFound
from toolkit.server import logscan, procs
from toolkit.server.discover import Candidate, choose_tritonserver
from toolkit.server.embedded import is_embedded, prepare_embedded
from toolkit.server.foreground import LogFollower, signals_ignored, signals_interrupt
from toolkit.server.lock import WorkdirLock
from toolkit.server.plan import LaunchPlan, LaunchSite
from toolkit.server.ports import PortInUseError, Ports, auto_ports, check_free
from toolkit.server.record import REPO_KEY_HEADER, connect_host
from toolkit.server.startup import (
    TRANSIENT,
    Health,
    ServerStartError,
    check_launch_path,
    check_workdir_free,
    model_control_args,
)
from toolkit.server.state import (
    ServerState,
    dead_stubs,
    default_log_path,
    http_ok,
    new_python_env,
    python_env_dirs,
    python_stubs,
    read_state,
    remove_server_files,
    remove_state,
    stub_message,
    unclaimed_python_env,
    update_state,
    write_state,
)

EXIT_TIMEOUT_ENV = "SDTK_EXIT_TIMEOUT_S"  # overrides the default --exit-timeout-secs
DEFAULT_READY_TIMEOUT = 600.0  # large TRT-LLM engines take minutes to load
DEFAULT_STOP_GRACE = 15.0
# After a stub died: how long a server that is shutting down (`sdtk stop` from another shell) may
# take to end by itself, and then the SIGTERM grace before SIGKILL. Short on purpose: Triton 2.51
# holds the requests the dead stub had in flight through an `ensemble` until its exit timeout,
# and those clients hang until the server ends (docs/runbooks/troubleshooting.md).
STOPPING_WAIT_S = 1.5
STUB_DEATH_GRACE_S = 1.0
_PORT_RETRIES = 3  # with auto_ports, relaunch on a port lost to a race


@dataclass(frozen=True)
class ServerSite:
    """Where one local tritonserver runs and how it is started: its repository, address, binary,
    log and flags. The launch's facts are the plan's (LaunchPlan); `TritonServer.site()` makes the
    plan's LaunchSite of both (with the ports and prefix chosen at start)."""

    model_repo: Path | str
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    tritonserver: Path | str | Candidate | None = None  # None: flag, $TRITONSERVER, PATH, NGC, embedded
    log_path: Path | str | None = None  # default <workdir>/logs/tritonserver.log
    extra_args: tuple[str, ...] = ()
    log_verbose: int = 0
    exit_timeout_s: int | None = 10
    disable_auto_complete_config: bool = False


_SITE_FIELDS = tuple(f.name for f in fields(ServerSite))


class TritonServer:
    """One tritonserver process (or an `mpirun` of several ranks) with its ports, log and state.

    Build it from a ServerSite and a LaunchPlan, or from a recipe's `serving` section
    (`from_serving`). Nothing happens until `start()` (or `with`): the constructor has no side effects.
    """

    def __init__(
        self,
        site: ServerSite | Path | str,
        plan: LaunchPlan | None = None,
        *,
        workdir: Path | str,
        model_name: str = "ensemble",
        auto_ports: bool = False,
        env: Mapping[str, str] | None = None,
        echo: TextIO | None = None,
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
    ):
        """`site`: where it runs (a bare path: that repository with the defaults); `plan`: the
        launch's facts (ranks, orchestrator mode, memory pools, env; default one process)."""
        site = site if isinstance(site, ServerSite) else ServerSite(site)
        self.model_repo = Path(site.model_repo).expanduser().absolute()
        self.workdir = Path(workdir).expanduser().absolute()
        self.model_name = model_name
        self.host = site.host
        self.ports = Ports(site.http_port, site.grpc_port, site.metrics_port)
        self.auto_ports = auto_ports
        self._tritonserver = site.tritonserver
        self.log_path = Path(site.log_path).absolute() if site.log_path else default_log_path(self.workdir)
        self.extra_args = list(site.extra_args)
        self.log_verbose = site.log_verbose
        # SDTK_EXIT_TIMEOUT_S shortens a stop that waits on requests Triton 2.51 still counts as
        # in flight after an ensemble request was cancelled (docs/runbooks/troubleshooting.md).
        env_exit = os.environ.get(EXIT_TIMEOUT_ENV, "").strip()
        self.exit_timeout_s = (
            int(env_exit) if env_exit.isdigit() and site.exit_timeout_s is not None else site.exit_timeout_s
        )
        self.disable_auto_complete_config = site.disable_auto_complete_config
        # ranks, orchestrator mode, memory pools, env (toolkit.server.plan); default one process
        self.plan = plan if plan is not None else LaunchPlan()
        self.env_overrides = dict(env or {})
        self.echo = echo
        self.ready_timeout = ready_timeout
        self.shm_prefix = f"sdtk{uuid.uuid4().hex[:8]}_"
        self.python_env = ""  # its Python backend's /tmp directory, found at READY (stop removes it)
        self._python_envs_before: set[str] | None = None  # /tmp's python_env dirs at launch
        self.restarts = 0
        self.validation = ""  # recorded in state.json: `sdtk deploy` sets pending / skipped / passed
        # Set (single-process launches): explicit model control, so that `sdtk restart MODEL`
        # can reload one model, with Triton's model-repository API restricted to this key.
        self.repo_key: str | None = None
        self._record = True
        # Fields every record of this server carries over (a watchdog's restart keeps its own),
        # and whether a failed start leaves state.json to the one who restarts it (the watchdog).
        self.record_extra: dict[str, Any] = {}
        self.keep_record = False
        self.argv: list[str] = []
        self.started_at: float | None = None
        self.detached = False
        self._proc: subprocess.Popen | None = None
        self._binary: Candidate | None = None
        self._follower: LogFollower | None = None
        self._lock: WorkdirLock | None = None
        self._own_lock = False

    def spec(self) -> dict[str, Any]:
        """The plain values that launch this server again, as it runs now (the watchdog of a
        detached deploy keeps them in `<workdir>/launch.json`); `from_spec` reads them."""
        return dict(
            model_repo=str(self.model_repo),
            workdir=str(self.workdir),
            model_name=self.model_name,
            host=self.host,
            http_port=self.ports.http,
            grpc_port=self.ports.grpc,
            metrics_port=self.ports.metrics,
            tritonserver=str(self.binary.path),
            log_path=str(self.log_path),
            extra_args=list(self.extra_args),
            log_verbose=self.log_verbose,
            exit_timeout_s=self.exit_timeout_s,
            disable_auto_complete_config=self.disable_auto_complete_config,
            plan=self.plan.to_dict(),
            env=dict(self.env_overrides),
            ready_timeout=self.ready_timeout,
        )

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> TritonServer:
        values = LaunchPlan.spec_values(spec)  # the plan as a LaunchPlan (older specs' loose keys too)
        site = {k: values.pop(k) for k in _SITE_FIELDS if k in values}
        site["extra_args"] = tuple(site.get("extra_args", ()))
        return cls(ServerSite(**site), values.pop("plan"), **values)

    @classmethod
    def from_serving(
        cls,
        serving: Any,
        model_repo: Path | str,
        *,
        workdir: Path | str,
        plan: LaunchPlan | None = None,
        model_name: str | None = None,
        tritonserver: Path | str | Candidate | None = None,
        auto_ports: bool = False,
        log_verbose: int = 0,
    ) -> TritonServer:
        """From a recipe's `serving` section (host, ports, model_name); `model_name` overrides."""
        site = ServerSite(
            model_repo,
            host=serving.host,
            http_port=serving.http_port,
            grpc_port=serving.grpc_port,
            metrics_port=serving.metrics_port,
            tritonserver=tritonserver,
            log_verbose=log_verbose,
        )
        return cls(
            site, plan, workdir=workdir, model_name=model_name or serving.model_name, auto_ports=auto_ports
        )

    # ------------------------------------------------------------------ facts

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc else None

    @property
    def http_url(self) -> str:
        return f"http://{connect_host(self.host)}:{self.ports.http}"

    @property
    def grpc_url(self) -> str:
        return f"{connect_host(self.host)}:{self.ports.grpc}"

    @property
    def metrics_url(self) -> str:
        return f"http://{connect_host(self.host)}:{self.ports.metrics}/metrics"

    @property
    def binary(self) -> Candidate:
        """The tritonserver to run, found once (flag, $TRITONSERVER, PATH, NGC, embedded)."""
        if self._binary is None:
            t = self._tritonserver
            if isinstance(t, Candidate):
                if not t.exists or t.path is None:
                    raise ToolNotFound(str(t.path or "tritonserver"), hint="pass --tritonserver")
                self._binary = t
            else:
                self._binary = choose_tritonserver(t)
        return self._binary

    @property
    def embedded(self) -> bool:
        b = self.binary
        return b.embedded or is_embedded(b.path)

    def site(self, backend_directory: Path | None = None) -> LaunchSite:
        """Where this server runs, for the plan's argv builder (toolkit.server.plan)."""
        if backend_directory is None and self.embedded:
            backend_directory = self.workdir / "triton_backends"
        return LaunchSite(
            tritonserver=str(self.binary.path),
            model_repo=str(self.model_repo),
            http_port=self.ports.http,
            grpc_port=self.ports.grpc,
            metrics_port=self.ports.metrics,
            host=self.host.strip("[]"),
            shm_prefix=self.shm_prefix,
            number_single_rank=False,  # the prefix is unique to this server already
            exit_timeout_s=self.exit_timeout_s,
            backend_directory=str(backend_directory) if backend_directory is not None else None,
            log_verbose=self.log_verbose,
            disable_auto_complete_config=self.disable_auto_complete_config,
            model_control=tuple(model_control_args(self.repo_key)) if self.repo_key else (),
            extra_args=tuple(self.extra_args),
        )

    def command(self, backend_directory: Path | None = None) -> list[str]:
        """The argv `start()` runs with the current ports (no side effects)."""
        return self.plan.argv(self.site(backend_directory))

    def redact(self, text: str) -> str:
        """`text` without the repository key (or a token from the environment)."""
        text = runner.redact(text)
        return text.replace(self.repo_key, "***") if self.repo_key else text

    # ------------------------------------------------------------------ lifecycle

    def _check_workdir_free(self) -> None:
        if not self.keep_record:  # else its watchdog relaunches it: the record is its own
            check_workdir_free(self.workdir)

    def _launch_once(self) -> None:
        if not self.model_repo.is_dir():
            raise ServerError(
                f"model repository {self.model_repo} does not exist",
                hint="build it first (sdtk deploy writes it), or check the path",
            )
        check_launch_path(self.model_repo, "model repository")
        check_launch_path(self.workdir, "workdir")
        if self.auto_ports:
            self.ports = auto_ports(self.host)
        check_free(self.host, self.ports)
        env = dict(os.environ)
        backend_dir = None
        if self.embedded:
            setup = prepare_embedded(self.workdir, env)
            env, backend_dir = setup.env, setup.backend_dir
        env.update(self.plan.env)
        env.update(self.env_overrides)
        self.argv = self.command(backend_dir)
        if self.log_path.exists():
            # Never truncate: a server we know nothing of may still write there.
            os.replace(self.log_path, self.log_path.with_name(self.log_path.name + ".prev"))
        hint = (
            "multi-GPU launches need mpirun (OpenMPI), as in NVIDIA's TensorRT-LLM container"
            if self.argv[0] == "mpirun"
            else "pass --tritonserver with a valid path"
        )
        lock_fds = (self._lock.fd,) if self._lock is not None else ()
        self._python_envs_before = python_env_dirs()
        self.python_env = ""
        self._proc = runner.spawn(
            self.argv,
            log_path=self.log_path,
            env=env,
            cwd=self.workdir,
            hint=hint,
            pass_fds=lock_fds,
            secrets=[self.repo_key] if self.repo_key else [],
        )
        if self._lock is not None:
            self._lock.record(server_pid=self._proc.pid)
        self.started_at = time.time()
        if self._record:
            # At once, before READY: a deploy killed while waiting leaves a server that
            # status/stop/redeploy must still find.
            write_state(self.workdir, self.state(status="starting"))
        if self.echo is not None and self._follower is None:
            self._follower = LogFollower(self.log_path, self.echo)
            self._follower.start()

    def start(
        self,
        *,
        detach: bool = False,
        wait: bool = True,
        ready_timeout: float | None = None,
        record: bool = True,
        lock: WorkdirLock | None = None,
    ) -> TritonServer:
        """Check ports, launch, and (by default) wait until the server and model are ready.

        On any failure, Ctrl-C / SIGTERM / SIGHUP included, the server is stopped before the
        error propagates. Once started it is recorded in `<workdir>/state.json` (`record`), so
        `sdtk status | logs | stop | infer` find it from another shell; `stop()` removes the
        record. With `detach`, the server is left running when this process exits.

        The workdir is locked (toolkit.server.lock) for as long as the server lives: the server
        inherits `lock` (the caller's, e.g. `sdtk deploy`'s) or one taken here.
        """
        if self.running:
            raise ServerError(f"this server is already running (pid {self.pid})")
        if lock is not None:
            self._lock, self._own_lock = lock, False
        elif self._lock is None or self._lock.fd < 0:
            self._lock, self._own_lock = (
                WorkdirLock.acquire(self.workdir, "a tritonserver launch (sdtk)"),
                True,
            )
        try:
            self._check_workdir_free()
            self._start(detach, wait, ready_timeout, record)
        except BaseException:
            if not self.running:
                self._release_lock()
            raise
        return self

    def _start(self, detach: bool, wait: bool, ready_timeout: float | None, record: bool) -> None:
        self._record = record or detach
        attempts = _PORT_RETRIES if self.auto_ports else 1
        transient_retried = False
        with signals_interrupt():
            for attempt in range(1, attempts + 2):  # one more for a TRANSIENT failure
                try:
                    self._launch_once()
                    if wait:
                        self.wait_ready(ready_timeout)
                        # READY: its Python backend has started, and made its directory.
                        self.python_env = new_python_env(self._python_envs_before or set())
                    if self._record:
                        write_state(self.workdir, self.state())
                    break
                except PortInUseError:
                    # Only reachable with auto_ports through a race: pick again.
                    if attempt >= attempts:
                        raise
                except ServerStartError as e:
                    with signals_ignored():
                        self.stop()
                    lost_port = e.reason == "exited" and any("already in use" in m for m in e.errors)
                    if lost_port and attempt < attempts:
                        continue
                    if e.reason in TRANSIENT and not transient_retried:
                        transient_retried = True  # Triton 2.51's hiccups, not the deployment's fault
                        log.logger("server").warning(f"{e}; starting it again")
                        continue
                    raise
                except BaseException:
                    with signals_ignored():
                        self.stop()
                    raise
        if detach:
            self.detach()

    def detach(self) -> ServerState:
        """Record the server in `<workdir>/state.json` and let it outlive this process."""
        if not self.running:
            raise ServerError("cannot detach: the server is not running")
        self.detached = True
        state = self.state()
        write_state(self.workdir, state)
        self._release_lock()  # the server holds its inherited copy
        if self._follower is not None:
            self._follower.stop()
            self._follower = None
        return state

    def state(self, status: str = "ready") -> ServerState:
        """The record of this server; at READY it lists the Python backend stubs."""
        assert self._proc is not None
        st = procs.stat(self._proc.pid)
        record = ServerState(
            pid=self._proc.pid,
            pgid=self._proc.pid,  # start_new_session: the server leads its own group
            start_ticks=st.start_ticks if st else None,
            started_at=self.started_at or time.time(),
            http_url=self.http_url,
            grpc_url=self.grpc_url,
            metrics_url=self.metrics_url,
            model_name=self.model_name,
            model_repo=str(self.model_repo),
            argv=[self.redact(a) for a in self.argv],
            log_path=str(self.log_path),
            workdir=str(self.workdir),
            host=self.host,
            http_port=self.ports.http,
            grpc_port=self.ports.grpc,
            metrics_port=self.ports.metrics,
            executable=os.path.basename(self.argv[0]) if self.argv else "tritonserver",
            env=dict(self.env_overrides) | self.plan.env,
            detached=self.detached,
            owner_pid=os.getpid(),
            status=status,
            shm_prefix=self.shm_prefix,
            python_env=self.python_env,
            stubs=python_stubs(self._proc.pid) if status == "ready" else {},
            restarts=self.restarts,
            validation=self.validation,
            repo_key=self.repo_key or "",
        )
        return replace(record, **self.record_extra)

    def health(self, timeout: float = 2.0) -> Health:
        base = self.http_url
        live = http_ok(f"{base}/v2/health/live", timeout)
        ready = live and http_ok(f"{base}/v2/health/ready", timeout)
        model_ready = live and http_ok(f"{base}/v2/models/{self.model_name}/ready", timeout)
        return Health(live, ready, model_ready)

    def repository_index(self, timeout: float = 2.0) -> list[dict] | None:
        """Triton's view of the repository: [{"name", "version", "state", "reason"}]."""
        headers = {REPO_KEY_HEADER: self.repo_key} if self.repo_key else {}
        req = urllib.request.Request(
            f"{self.http_url}/v2/repository/index", data=b"{}", method="POST", headers=headers
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - our own server
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            e.close()
            return None
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def wait_ready(
        self, timeout: float | None = None, model: str | None = None, interval: float = 0.25
    ) -> Health:
        """Poll until live + ready + `model` ready, the process exits, or `timeout` passes.

        Raises ServerStartError with Triton's own load errors, elapsed time, pid, and the log tail
        (toolkit.server.readiness).
        """
        from toolkit.server.readiness import wait_ready

        if self._proc is None:
            raise ServerError("the server was never started")
        return wait_ready(
            self, self._proc, self.ready_timeout if timeout is None else timeout, model, interval
        )

    def logs(self, lines: int | None = logscan.TAIL_LINES) -> str:
        """The server log (its last `lines` lines; all of it with None)."""
        if lines is None:
            try:
                return self.log_path.read_text(errors="replace")
            except OSError:
                return ""
        return logscan.tail(self.log_path, lines)

    def stop(self, grace: float = DEFAULT_STOP_GRACE) -> int | None:
        """SIGTERM the server, wait up to `grace` s, then SIGKILL its whole process group.

        Also removes state.json if it records this server. Returns the exit code.
        """
        proc = self._proc
        if proc is None:
            self._release_lock()
            return None
        with contextlib.suppress(ServerError):  # a watchdog must not take this for a failure
            update_state(self.workdir, proc.pid, status="stopping")
        runner.kill_group(proc, grace, leader_only=True)
        procs.kill_group_now(proc.pid)  # Python backend stubs that outlived their server
        python_env = self.python_env
        if not python_env and self._python_envs_before is not None:
            # Not found at READY (a start that failed before it, or two servers starting at once):
            # its directory, if it is surely its own now.
            python_env = unclaimed_python_env(self._python_envs_before)
        self._python_envs_before = None
        remove_server_files(self.shm_prefix, python_env)
        if self._follower is not None:
            self._follower.stop()
            self._follower = None
        st = None
        with contextlib.suppress(ServerError):
            st = read_state(self.workdir)
        if st is not None and st.pid == proc.pid and not self.keep_record:
            remove_state(self.workdir)
        self.detached = False
        self._release_lock()
        return proc.returncode

    def _release_lock(self) -> None:
        if self._lock is not None and self._own_lock:
            self._lock.close()
            self._lock = None

    def _supervise(self, on_failure: str, poll_s: float) -> int:
        """Wait for the server to exit, checking its Python stubs every `poll_s` s: Triton never
        restarts a dead stub and its health endpoints do not notice one (server#8604)."""
        while True:
            assert self._proc is not None
            try:
                return self._proc.wait(timeout=poll_s)
            except subprocess.TimeoutExpired:
                pass
            st = read_state(self.workdir)
            dead = dead_stubs(st) if st is not None and st.pid == self._proc.pid else {}
            if not dead:
                continue
            try:  # stubs also end when the server shuts down (`sdtk stop` from another shell)
                return self._proc.wait(timeout=STOPPING_WAIT_S)
            except subprocess.TimeoutExpired:
                pass  # a dead stub never takes the server down: this is the failure
            tail = logscan.tail(self.log_path)
            if on_failure == "none":
                continue  # `sdtk status` reports it; `sdtk restart MODEL` brings it back
            if on_failure == "restart-model" and self.repo_key:
                from toolkit.server.modelcontrol import restart_model

                for model in dead:
                    log.logger("server").warning(f"{stub_message(dead)}; reloading '{model}'\n{tail}")
                    restart_model(self.workdir, model)
                continue
            if on_failure == "stop":
                with signals_ignored():
                    self.stop(STUB_DEATH_GRACE_S)
                raise ServerError(
                    stub_message(dead) + "; the server was stopped",
                    log_tail=tail,
                    log_path=self.log_path,
                    hint="see the server log; --on-failure restart (or restart-model) restarts it instead",
                )
            log.logger("server").warning(f"{stub_message(dead)}; restarting the server\n{tail}")
            restarts = self.restarts + 1
            with signals_ignored():
                self.stop(STUB_DEATH_GRACE_S)
            self.auto_ports = False  # the same ports: clients keep their URLs
            self.restarts = restarts
            self.start(record=True)

    def serve_forever(
        self, grace: float = DEFAULT_STOP_GRACE, *, on_failure: str = "stop", poll_s: float = 1.0
    ) -> int:
        """Foreground mode: block until SIGINT/SIGTERM/SIGHUP (then stop cleanly) or the server
        exits (e.g. `sdtk stop` from another shell).

        Returns the signal number that ended it, or 0 if the server exited cleanly by itself.
        Raises ServerError with the log tail if the server died on its own with an error. When
        one of its Python backend stubs dies, `on_failure` says what to do (as the watchdog of a
        detached deploy, toolkit.server.watchdog): `stop` (raise ServerError), `restart` (the
        server, counted in state.json), `restart-model` (reload the dead model), `none`. The
        handlers are installed only for the duration of this call (main thread only).
        """
        if self._proc is None:
            raise ServerError("the server was never started")
        try:
            with signals_interrupt() as received:
                try:
                    rc = self._supervise(on_failure, poll_s)
                except KeyboardInterrupt:
                    # Shield the clean stop from a second Ctrl-C; the group is killed either way.
                    with signals_ignored():
                        self.stop(grace)
                    return received[0] if received else int(signal.SIGINT)
        finally:
            if self._proc.poll() is None and not self.detached:
                self.stop(grace)
        self.stop(grace)  # reap stubs left behind
        if rc == 0:
            return 0
        errors = logscan.startup_errors_in(self.log_path)
        raise ServerError(
            f"tritonserver (pid {self._proc.pid}) exited unexpectedly with code {rc}"
            + (": " + "; ".join(errors) if errors else ""),
            log_tail=logscan.tail(self.log_path),
            log_path=self.log_path,
            hint=f"see the server log: {self.log_path}",
        )

    def __enter__(self) -> TritonServer:
        if not self.running:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.detached:
            self.stop()

    def __repr__(self) -> str:
        return (
            f"TritonServer(pid={self.pid}, http={self.http_url}, grpc={self.grpc_url}, "
            f"model={self.model_name!r}, repo={str(self.model_repo)!r})"
        )
