"""A generate_stream cut short is a failed request, never a short success, for both clients and
for `sdtk bench`'s load generator.

The server here is a raw socket that speaks exactly the bytes Triton 2.51's HTTP frontend sends
for generate_stream (a chunked `text/event-stream` body of `data: {...}` events, ended by the
zero-length chunk), then stops the way a dying server does: the connection closes in the middle
of the body (tritonserver killed, or restarted by the watchdog), or the body ends with no event
at all. tests/stress/test_served_faults.py kills a real server's stub mid-stream.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from toolkit.bench.measure.loadgen import Sampling, TritonEndpoint, run_request
from toolkit.bench.measure.workloads import Prompt
from toolkit.client import AsyncTritonClient, ConnectionLost, TritonClient

CONFIG = {
    "name": "m",
    "max_batch_size": 1,
    "model_transaction_policy": {"decoupled": True},
    "input": [
        {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]},
        {"name": "max_tokens", "data_type": "TYPE_INT32", "dims": [1]},
        {"name": "stream", "data_type": "TYPE_BOOL", "dims": [1]},
    ],
    "output": [{"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]}],
}


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(text: str) -> bytes:
    return chunk(b"data: " + json.dumps({"model_name": "m", "text_output": text}).encode() + b"\n\n")


def reply(body: bytes, content_type: str = "application/json") -> bytes:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


STREAM_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
ENDINGS = {
    "complete": STREAM_HEAD + event("a") + event("b") + b"0\r\n\r\n",
    "cut": STREAM_HEAD + event("a") + event("b"),  # the connection closes mid-body
    "empty": STREAM_HEAD + b"0\r\n\r\n",  # a body that ends before any event
}


@contextmanager
def triton_like(ending: str) -> Iterator[str]:
    """A server that answers the config and readiness calls, then generate_stream with `ending`."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            while not stop.is_set():
                data = b""
                while b"\r\n\r\n" not in data:
                    got = conn.recv(65536)
                    if not got:
                        return
                    data += got
                head, _, rest = data.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                while len(rest) < length:
                    rest += conn.recv(65536)
                path = head.split(b" ")[1].decode()
                if path.endswith("/generate_stream"):
                    conn.sendall(ENDINGS[ending])
                    return  # close: after the body, or in the middle of it
                conn.sendall(reply(json.dumps(CONFIG).encode() if path.endswith("/config") else b""))

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()


def test_a_complete_stream_is_a_success():
    with triton_like("complete") as url, TritonClient(url, model="m") as c:
        assert c.stream("x", max_tokens=2).response.text == "ab"


@pytest.mark.parametrize("ending", ["cut", "empty"])
def test_a_cut_stream_raises_in_both_clients(ending):
    with triton_like(ending) as url:
        with TritonClient(url, model="m") as c, pytest.raises(ConnectionLost) as sync_error:
            list(c.stream("x", max_tokens=2))

        async def main() -> None:
            async with AsyncTritonClient(url, model="m") as c:
                s = await c.stream("x", max_tokens=2)
                await s.collect()

        with pytest.raises(ConnectionLost) as async_error:
            asyncio.run(main())
    for e in (sync_error.value, async_error.value):
        assert "mid-request" in str(e) or "without" in str(e), e
        assert "sdtk status" in (e.hint or "")


@pytest.mark.parametrize("ending", ["cut", "empty"])
def test_bench_counts_a_cut_stream_as_failed(ending):
    async def main():
        endpoint = TritonEndpoint(url, model="m", protocol="http")
        await endpoint.check()
        try:
            return await run_request(
                endpoint, 0, Prompt("x", "code", 2), seed=0, sampling=Sampling(), timeout=30
            )
        finally:
            await endpoint.close()

    with triton_like(ending) as url:
        rec = asyncio.run(main())
    assert rec.error is not None and rec.error_kind == "connection", (rec.error, rec.error_kind)
