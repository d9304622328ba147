"""Ports for tritonserver: pick free ones, or prove the chosen ones are free before launch.

Upstream's launcher finds out about a taken port only from Triton's own log, after the models
have loaded ("Socket '0.0.0.0:8001' already in use"; tensorrtllm_backend#243). We check first
and name the process that holds the port.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import ServerError
from toolkit.server import procs

# Which recipe field / CLI flag sets each port; used in error hints.
PORT_FIELDS = {
    "http": ("serving.http_port", "--http-port"),
    "grpc": ("serving.grpc_port", "--grpc-port"),
    "metrics": ("serving.metrics_port", "--metrics-port"),
}


@dataclass(frozen=True)
class Ports:
    http: int = 8000
    grpc: int = 8001
    metrics: int = 8002

    def items(self) -> list[tuple[str, int]]:
        return [("http", self.http), ("grpc", self.grpc), ("metrics", self.metrics)]


@dataclass(frozen=True)
class PortOwner:
    pid: int
    argv: list[str]

    def describe(self) -> str:
        cmd = " ".join(self.argv)[:160] or "?"
        return f"pid {self.pid} ({cmd})"


class PortInUseError(ServerError):
    """A port tritonserver needs is already bound by another socket."""

    def __init__(self, kind: str, host: str, port: int, owner: PortOwner | None):
        self.kind = kind
        self.host = host
        self.port = port
        self.owner = owner
        field, flag = PORT_FIELDS[kind]
        who = f", held by {owner.describe()}" if owner else ""
        hint = f"change {field} in the recipe (or pass {flag} / --auto-ports)"
        if owner is not None and any("tritonserver" in a for a in owner.argv[:2]):
            hint += f"; or stop that server first (sdtk stop, or kill {owner.pid})"
        super().__init__(f"{kind} port {port} on {host} is already in use{who}", hint=hint)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET


def bindable(host: str, port: int) -> bool:
    """Could a server bind `host:port` right now (as tritonserver would, with SO_REUSEADDR)?"""
    h = host.strip("[]")
    with socket.socket(_family(h), socket.SOCK_STREAM) as s:
        # SO_REUSEADDR ignores sockets in TIME_WAIT (which tritonserver can reuse), not listeners.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((h, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise ServerError(f"cannot bind {host}:{port}: {e.strerror}", hint="check serving.host") from None
    return True


def free_ports(n: int = 3, host: str = "127.0.0.1") -> list[int]:
    """`n` distinct ports the kernel says are free on `host` right now."""
    h = host.strip("[]")
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(_family(h), socket.SOCK_STREAM)
            socks.append(s)
            s.bind((h, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def auto_ports(host: str = "127.0.0.1") -> Ports:
    http, grpc, metrics = free_ports(3, host)
    return Ports(http, grpc, metrics)


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) < 10:
                continue
            local, state, inode = f[1], f[3], f[9]
            with contextlib.suppress(ValueError):
                if int(local.rsplit(":", 1)[1], 16) == port and state == "0A" and inode != "0":
                    inodes.add(inode)
    return inodes


def port_owner(port: int) -> PortOwner | None:
    """The process listening on TCP `port`, found through /proc/net/tcp* and /proc/*/fd.

    None when nobody listens or the owner is not visible to us (another user without root).
    """
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    targets = {f"socket:[{i}]" for i in inodes}
    for entry in procs.PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if str(fd.readlink()) in targets:
                    pid = int(entry.name)
                    return PortOwner(pid, procs.cmdline(pid))
            except OSError:
                continue
    return None


def check_free(host: str, ports: Ports) -> None:
    """Raise PortInUseError for the first of `ports` that cannot be bound on `host`."""
    seen: dict[int, str] = {}
    for kind, port in ports.items():
        if port in seen:
            field, _ = PORT_FIELDS[kind]
            raise ServerError(
                f"{kind} port {port} is also the {seen[port]} port",
                hint=f"give each port its own number ({field})",
            )
        seen[port] = kind
        if not bindable(host, port):
            raise PortInUseError(kind, host, port, port_owner(port))
