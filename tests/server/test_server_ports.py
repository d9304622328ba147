"""Port checks before launch: free-port picking, taken ports with their owner."""

from __future__ import annotations

import os
import socket

import pytest

from toolkit.errors import ServerError
from toolkit.server.ports import (
    PortInUseError,
    Ports,
    auto_ports,
    bindable,
    check_free,
    free_ports,
    port_owner,
)


@pytest.fixture
def held_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(3)
    assert len(set(ports)) == 3
    assert all(bindable("127.0.0.1", p) for p in ports)
    p = auto_ports()
    assert len({p.http, p.grpc, p.metrics}) == 3


def test_taken_port_names_field_and_owner(held_port):
    assert not bindable("127.0.0.1", held_port)
    owner = port_owner(held_port)
    assert owner is not None and owner.pid == os.getpid()
    free = free_ports(2)
    with pytest.raises(PortInUseError) as ei:
        check_free("127.0.0.1", Ports(http=free[0], grpc=held_port, metrics=free[1]))
    e = ei.value
    assert e.kind == "grpc" and e.port == held_port
    assert f"grpc port {held_port}" in str(e) and f"pid {os.getpid()}" in str(e)
    assert "serving.grpc_port" in e.hint and "--grpc-port" in e.hint


def test_port_on_all_interfaces_blocks_localhost():
    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    s.listen()
    try:
        assert not bindable("127.0.0.1", s.getsockname()[1])
    finally:
        s.close()


def test_duplicate_ports_rejected():
    p = free_ports(2)
    with pytest.raises(ServerError, match="also the http port"):
        check_free("127.0.0.1", Ports(http=p[0], grpc=p[0], metrics=p[1]))


def test_unused_port_has_no_owner():
    assert port_owner(free_ports(1)[0]) is None
