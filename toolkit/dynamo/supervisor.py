"""The supervisor of a Dynamo deployment: `python -m toolkit.dynamo.supervisor ROOT [--on-failure P]`.

The one process state.json records (toolkit.server.state: pid, process group, the workdir lock it
inherits). It starts every process of `<ROOT>/dynamo/plan.json` (toolkit.dynamo.plan) in its own
process group, so that `sdtk stop` (SIGTERM to this process, then SIGKILL to the group) leaves
nothing behind; it writes their pids to `<ROOT>/dynamo/processes.json` and its own log of what
happened (started, died, restarted) to `<ROOT>/logs/dynamo.log`.

A process that dies is handled by the policy (toolkit.server.policies): `restart` (the default)
starts it again with the same argv (its requests in flight fail; the router sends new ones to the
live workers), `stop` stops the deployment, `none` records it and leaves it dead. SIGTERM stops the
workers, then the frontend, each with a grace period.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from toolkit import runner
from toolkit._fs import atomic_write
from toolkit.dynamo.plan import PLAN_FILE, PROCESSES_FILE, SUBDIR, DynamoPlan, Proc

POLL_S = 0.2
GRACE_S = 10.0
MAX_RESTARTS = 20  # a process that keeps dying is left dead after this many restarts


@dataclass
class Child:
    proc: Proc
    popen: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


def sweep_stale(discovery: Path) -> list[str]:
    """Remove the file-discovery entries of endpoints that no longer accept connections (a worker
    that died cannot deregister): without this, the frontend's router keeps sending new requests
    to the dead instance until one fails (seen with Dynamo 1.6.1: a 503 to the first request that
    reaches it). Entries are `<store>/v1/instances/<key>` (JSON with `transport.tcp`
    "host:port/..."), with the model card under the same key in `<store>/v1/mdc/`. Returns the keys."""
    import contextlib
    import socket

    removed = []
    instances = discovery / "v1" / "instances"
    for entry in sorted(instances.glob("*")) if instances.is_dir() else []:
        try:
            addr = str(json.loads(entry.read_text())["transport"]["tcp"]).split("/", 1)[0]
            host, port = addr.rsplit(":", 1)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        with socket.socket() as sock:
            sock.settimeout(1.0)
            if sock.connect_ex((host, int(port))) == 0:
                continue
        for path in (entry, discovery / "v1" / "mdc" / entry.name):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        removed.append(entry.name)
    return removed


def log(msg: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {msg}", flush=True)


class Supervisor:
    def __init__(self, root: Path, policy: str):
        self.root = root
        self.policy = policy
        self.plan = DynamoPlan.from_dict(json.loads((root / SUBDIR / PLAN_FILE).read_text()))
        self.children = [Child(p) for p in self.plan.processes]
        self.stopping = False

    def start(self, child: Child) -> None:
        env = dict(os.environ) | child.proc.env
        Path(env["HOME"]).mkdir(parents=True, exist_ok=True)
        Path(env["DYN_FILE_KV"]).mkdir(parents=True, exist_ok=True)
        log_path = Path(child.proc.log)
        if log_path.exists():  # keep the dead one's log for `sdtk logs`
            os.replace(log_path, log_path.with_name(log_path.name + ".prev"))
        child.popen = runner.spawn(
            child.proc.argv, log_path=log_path, env=env, cwd=self.root, new_session=False
        )
        log(f"{child.proc.name}: started pid {child.popen.pid}; log {log_path}")
        self.record()

    def record(self) -> None:
        data = {
            c.proc.name: {
                "pid": c.pid,
                "alive": c.alive(),
                "restarts": c.restarts,
                "failures": c.failures[-5:],
                "log": c.proc.log,
                "metrics_url": c.proc.metrics_url,
            }
            for c in self.children
        }
        atomic_write(self.root / SUBDIR / PROCESSES_FILE, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def stop(self, *_: object) -> None:
        self.stopping = True

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        for child in self.children:
            self.start(child)
        while not self.stopping:
            time.sleep(POLL_S)
            for child in self.children:
                if self.stopping or child.alive() or child.popen is None:
                    continue
                code = child.popen.returncode
                what = f"{child.proc.name} (pid {child.pid}) exited {code}"
                gone = sweep_stale(Path(child.proc.env["DYN_FILE_KV"]))
                if gone:
                    log(f"{child.proc.name}: removed its registration {', '.join(gone)} from file discovery")
                child.failures.append(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {what}")
                if self.policy == "stop":
                    log(f"{what}: stopping the deployment (--on-failure stop)")
                    self.stopping = True
                elif self.policy == "restart" and child.restarts < MAX_RESTARTS:
                    child.restarts += 1
                    log(f"{what}: restarting it (restart {child.restarts})")
                    self.start(child)
                else:
                    log(f"{what}: left dead (--on-failure {self.policy})")
                    child.popen = None
                    self.record()
        self.shutdown()
        return 0

    def shutdown(self) -> None:
        """Workers first (they deregister), then the frontend; SIGKILL whatever outlives GRACE_S."""
        for group in (self.children[1:], self.children[:1]):
            for child in group:
                if child.alive():
                    assert child.popen is not None
                    child.popen.send_signal(signal.SIGTERM)
            for child in group:
                if child.popen is not None:
                    try:
                        child.popen.wait(timeout=GRACE_S)
                    except subprocess.TimeoutExpired:
                        child.popen.kill()
                        child.popen.wait()
        log("stopped every process")
        self.record()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m toolkit.dynamo.supervisor")
    p.add_argument("root", type=Path, help="the deployment directory")
    p.add_argument("--on-failure", default="restart", choices=("restart", "stop", "none"))
    args = p.parse_args(argv)
    sys.exit(Supervisor(args.root.resolve(), args.on_failure).run())


if __name__ == "__main__":
    main()
