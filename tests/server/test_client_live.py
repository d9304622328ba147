"""Clients (sync, async; HTTP, gRPC; streaming or not) against a real tritonserver serving
fake LLM models with the TRT-LLM ensemble's inputs and outputs."""

from __future__ import annotations

import asyncio
import time

import pytest
from triton_support import serving

from toolkit.client import (
    AsyncTritonClient,
    ClientError,
    GenerationRequest,
    ServerUnreachable,
    TritonClient,
)
from toolkit.errors import GenerationError
from toolkit.server.launch import TritonServer
from toolkit.server.ports import free_ports

from .conftest import add_model

pytestmark = pytest.mark.tritonserver

PROMPT = "speculative decoding drafts tokens"
WORDS = PROMPT.split()


def expected(n: int) -> str:
    return "".join(" " + WORDS[i % len(WORDS)] for i in range(n))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("client_live")
    repo = root / "repo"
    add_model(repo, "ensemble", decoupled=True, max_batch_size=8, token_delay_ms=2)
    add_model(repo, "ensemble_sync", decoupled=False, max_batch_size=0)
    add_model(repo, "tensorrt_llm_bls", decoupled=False, max_batch_size=4, bls=True)
    # serving(): the short stop grace (tests/triton_support.py); test_server_lifecycle.py checks the graceful stop.
    with serving(TritonServer(repo, workdir=root / "wd", auto_ports=True, ready_timeout=60)) as s:
        yield s


@pytest.fixture(params=["http", "grpc"])
def client(request, server):
    url = server.http_url if request.param == "http" else server.grpc_url
    with TritonClient(url, protocol=request.param, timeout=20) as c:
        yield c


@pytest.mark.parametrize("model", ["ensemble", "ensemble_sync", "tensorrt_llm_bls"])
def test_generate(client, model):
    client.model = model
    r = client.generate(PROMPT, max_tokens=6, temperature=0.0, top_k=1, top_p=1.0, seed=7, end_id=2)
    assert r.text == expected(6)
    assert r.model == model and r.protocol == client.protocol and not r.streamed
    assert r.num_chunks == 1 and r.output_tokens == 6
    # The fake accepts 3 of every 4 draft tokens.
    assert (r.total_accepted_draft_tokens, r.total_draft_tokens) == (4, 6)
    assert r.acceptance_rate == pytest.approx(4 / 6, rel=1e-5)
    st = r.server_times_ns
    assert st["arrival_time_ns"] <= st["first_token_time_ns"] <= st["last_token_time_ns"]
    assert r.request_start_ns < r.chunk_times_ns[0] == r.end_ns
    assert 0 < r.latency_s < 10


def test_batch_dim_follows_model_config(client):
    client.model = "ensemble"
    assert client.model_info().shape == [1, 1] and client.model_info().decoupled
    client.model = "ensemble_sync"
    info = client.model_info(refresh=True)
    assert info.shape == [1] and not info.decoupled and "text_input" in info.required


def test_stream(client):
    client.model = "ensemble"
    with client.stream(PROMPT, max_tokens=5, exclude_input_in_output=True) as s:
        chunks = list(s)
    assert [c.text for c in chunks] == [" " + WORDS[i % 4] for i in range(5)]
    assert [c.index for c in chunks] == list(range(5))
    assert [c.outputs["num_output_tokens"] for c in chunks] == [1] * 5  # per response; summed below
    # gRPC flags the final response; HTTP server-sent events just end.
    assert chunks[-1].final == (client.protocol == "grpc") and not chunks[0].final
    r = s.response
    assert r.streamed and r.text == expected(5) and r.num_chunks == 5
    assert r.chunk_times_ns == sorted(r.chunk_times_ns) and len(r.chunk_gaps_s) == 4
    assert r.output_tokens == 5 and r.total_draft_tokens == 5 and r.total_accepted_draft_tokens == 3
    assert r.ttft_s is not None and r.ttft_s <= r.latency_s


def test_stream_with_input_echo(client):
    client.model = "ensemble"
    r = client.stream(GenerationRequest("a b", max_tokens=2, exclude_input_in_output=False)).response
    assert r.text == "a b a b"


def test_closing_a_stream_early_leaves_server_usable(client):
    client.model = "ensemble"
    s = client.stream(PROMPT, max_tokens=200)
    first = next(s)
    s.close()
    assert first.text == " speculative"
    assert client.generate("ok", max_tokens=1).text == " ok"


def test_num_draft_tokens_only_for_bls(client):
    client.model = "ensemble"
    with pytest.raises(GenerationError, match="no input 'num_draft_tokens'") as ei:
        client.generate(PROMPT, num_draft_tokens=4)
    assert "tensorrt_llm_bls" in ei.value.hint
    client.model = "tensorrt_llm_bls"
    r = client.generate(PROMPT, max_tokens=4, num_draft_tokens=0)
    assert r.total_draft_tokens == 0 and r.text == expected(4)


def test_stream_needs_decoupled_model(client):
    client.model = "ensemble_sync"
    with pytest.raises(GenerationError, match="not decoupled") as ei:
        client.stream(PROMPT)
    assert "serving.decoupled" in ei.value.hint


def test_unknown_model(client):
    client.model = "ensembel"
    with pytest.raises(ClientError) as ei:
        client.generate(PROMPT)
    assert "ensembel" in str(ei.value) and "ensemble" in (ei.value.hint or "")


def test_bad_inputs_rejected_before_sending(client):
    client.model = "ensemble"
    with pytest.raises(GenerationError, match="no input 'temprature'") as ei:
        client.generate(PROMPT, extra_inputs={"temprature": 0.5})
    assert ei.value.hint == "did you mean 'temperature'?"
    with pytest.raises(GenerationError, match="empty"):
        client.generate("")


def test_http_infer_api(server):
    with TritonClient(server.http_url, model="ensemble_sync", http_api="infer") as c:
        r = c.generate(PROMPT, max_tokens=3)
        assert r.text == expected(3) and r.output_tokens == 3
    with (
        TritonClient(server.http_url, model="ensemble", http_api="infer") as c,
        pytest.raises(GenerationError, match="decoupled"),
    ):
        c.generate(PROMPT)


def test_concurrent_grpc_streams_from_threads(server):
    from concurrent.futures import ThreadPoolExecutor

    with TritonClient(server.grpc_url, protocol="grpc") as c, ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: c.stream(f"w{i}", max_tokens=3).response, range(4)))
    assert [r.text for r in results] == [f" w{i} w{i} w{i}" for i in range(4)]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_async_client(server, protocol):
    url = server.http_url if protocol == "http" else server.grpc_url

    async def main():
        async with AsyncTritonClient(url, protocol=protocol, timeout=20) as c:
            r = await c.generate(PROMPT, max_tokens=4)
            assert r.text == expected(4) and r.protocol == protocol and r.acceptance_rate == 0.75
            async with await c.stream(PROMPT, max_tokens=3) as s:
                texts = [ch.text async for ch in s]
            assert texts == [" speculative", " decoding", " drafts"]
            assert s.response.num_chunks == 3 and s.response.text == expected(3)
            many = await asyncio.gather(*(c.generate(f"p{i}", max_tokens=2) for i in range(6)))
            assert [m.text for m in many] == [f" p{i} p{i}" for i in range(6)]
            c.model = "ensemble_sync"
            assert (await c.generate(PROMPT, max_tokens=2)).text == expected(2)
            async with AsyncTritonClient(url, protocol=protocol) as fresh:
                total = await (await fresh.stream(PROMPT, max_tokens=2)).collect()
            assert total.text == expected(2)

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_async_unknown_model_did_you_mean(server, protocol):
    # Was a drift: only the sync client listed the served models and guessed the intended one.
    url = server.http_url if protocol == "http" else server.grpc_url

    async def main():
        async with AsyncTritonClient(url, protocol=protocol, model="ensembel", timeout=20) as c:
            await c.generate(PROMPT)

    with pytest.raises(ClientError) as ei:
        asyncio.run(main())
    assert "ensembel" in str(ei.value)
    assert ei.value.hint.startswith("did you mean 'ensemble'? served models: ")
    assert "ensemble_sync" in ei.value.hint and "tensorrt_llm_bls" in ei.value.hint


def test_async_http_infer_api(server):
    # Was a drift: http_api="infer" existed only in the sync client.
    async def main():
        async with AsyncTritonClient(server.http_url, model="ensemble_sync", http_api="infer") as c:
            r = await c.generate(PROMPT, max_tokens=3)
            assert r.text == expected(3) and r.output_tokens == 3 and r.protocol == "http"
        async with AsyncTritonClient(server.http_url, model="ensemble", http_api="infer") as c:
            with pytest.raises(GenerationError, match="decoupled"):
                await c.generate(PROMPT)

    asyncio.run(main())
    with pytest.raises(GenerationError, match="http_api must be"):
        AsyncTritonClient(server.http_url, http_api="generat")


def test_async_docstring_example_runs(server):
    # Was a drift: the module's example used `async with c.stream(...)`, a TypeError.
    import textwrap

    from toolkit.client import aio

    doc = aio.__doc__
    example = doc[: doc.index("\n\n", doc.index("async with"))]
    example = textwrap.dedent(example[example.index("    async with") :])
    body = textwrap.indent(example, "    ")
    scope: dict = {"AsyncTritonClient": AsyncTritonClient}
    exec(f"async def example(url):\n{body}\n    return r, chunk, total\n", scope)
    r, chunk, total = asyncio.run(scope["example"](server.grpc_url))
    assert r.text == total.text == " Hello" * 32 and total.num_chunks == 32
    assert chunk.text == " Hello"


def test_sync_and_async_share_one_core():
    from toolkit.client.core import ClientCore

    assert issubclass(TritonClient, ClientCore) and issubclass(AsyncTritonClient, ClientCore)
    public = {n for n in vars(TritonClient) if not n.startswith("_")}
    assert public == {n for n in vars(AsyncTritonClient) if not n.startswith("_")}
    # The async client defines only I/O: no request preparation or error making of its own.
    assert not {"_prepare", "_route", "_tensors", "_config_from_http"} & set(vars(AsyncTritonClient))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_connection_refused_has_hint(protocol):
    port = free_ports(1)[0]
    url = f"127.0.0.1:{port}"
    t0 = time.monotonic()
    with pytest.raises(ServerUnreachable) as ei:
        TritonClient(url, protocol=protocol, timeout=5).generate(PROMPT)
    assert "sdtk status" in ei.value.hint and time.monotonic() - t0 < 5

    async def main():
        async with AsyncTritonClient(url, protocol=protocol, timeout=5) as c:
            await c.generate(PROMPT)

    with pytest.raises(ServerUnreachable):
        asyncio.run(main())


def test_server_handle_reports(server):
    assert server.health().ok
    assert "Started HTTPService" in server.logs(None)
    assert server.logs(5).count("\n") == 5
    assert server.returncode is None and server.running
