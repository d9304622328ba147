"""Fixtures for the bench tests: synthetic request records, a fake async endpoint, and a
real tritonserver serving a fake speculative model (fake_spec/model.py)."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest
from triton_support import (
    config_pbtxt,
    tritonserver_missing,  # noqa: F401 - re-exported to the bench tests
)

from toolkit.bench.measure.loadgen import BenchResult, Chunk, LevelResult
from toolkit.bench.measure.metrics import RequestRecord

FAKE_MODEL = Path(__file__).parent / "fake_spec" / "model.py"

_INPUTS = [
    ("text_input", "TYPE_STRING", False),
    ("max_tokens", "TYPE_INT32", False),
    ("exclude_input_in_output", "TYPE_BOOL", True),
    ("stream", "TYPE_BOOL", True),
    ("temperature", "TYPE_FP32", True),
    ("seed", "TYPE_UINT64", True),
    ("return_perf_metrics", "TYPE_BOOL", True),
    ("return_num_output_tokens", "TYPE_BOOL", True),
]
_OUTPUTS = [
    ("text_output", "TYPE_STRING", "-1"),
    ("acceptance_rate", "TYPE_FP32", "1"),
    ("total_accepted_draft_tokens", "TYPE_INT32", "1"),
    ("total_draft_tokens", "TYPE_INT32", "1"),
    ("num_output_tokens", "TYPE_INT32", "1"),
    ("arrival_time_ns", "TYPE_INT64", "1"),
    ("first_token_time_ns", "TYPE_INT64", "1"),
    ("last_token_time_ns", "TYPE_INT64", "1"),
]


def fake_config(name: str, *, bls: bool = False, **params: object) -> str:
    inputs = list(_INPUTS) + ([("num_draft_tokens", "TYPE_INT32", True)] if bls else [])
    return config_pbtxt(
        name,
        inputs=[(n, t, "1", opt) for n, t, opt in inputs],
        outputs=_OUTPUTS,
        decoupled=True,
        max_batch_size=8,
        parameters={k: str(v) for k, v in params.items()},
    )


def make_fake_repo(root: Path, models: dict[str, dict]) -> Path:
    repo = root / "repo"
    for name, params in models.items():
        d = repo / name
        (d / "1").mkdir(parents=True, exist_ok=True)
        shutil.copy(FAKE_MODEL, d / "1" / "model.py")
        params = dict(params)
        bls = bool(params.pop("bls", False))
        (d / "config.pbtxt").write_text(fake_config(name, bls=bls, **params))
    return repo


# --------------------------------------------------------------------------- synthetic data


def record(
    index: int,
    *,
    start: float = 0.0,
    ttft: float = 0.1,
    gaps: list[float] | None = None,
    tokens: list[int] | None = None,
    accepted: int | None = None,
    drafted: int | None = None,
    concurrency: int = 1,
    error: str | None = None,
) -> RequestRecord:
    """A request whose first chunk arrives `ttft` after `start` and later chunks `gaps` apart."""
    gaps = [0.05] * 9 if gaps is None else gaps
    tokens = tokens or [1] * (len(gaps) + 1)
    times = [start + ttft]
    for g in gaps:
        times.append(times[-1] + g)
    return RequestRecord(
        index=index,
        start=start,
        chunk_times=times if not error else [],
        chunk_tokens=tokens if not error else [],
        end=times[-1] if not error else None,
        concurrency=concurrency,
        accepted_draft_tokens=accepted,
        draft_tokens=drafted,
        error=error,
        error_kind="server" if error else None,
        category="code",
    )


def synthetic_run(
    speed: float,
    *,
    levels=(1, 2, 4),
    n: int = 20,
    slowdown_per_level: float = 0.0,
    multi: int = 1,
    seed: int = 0,
) -> BenchResult:
    """A BenchResult whose requests decode at `speed` tokens/s (falling with concurrency)."""
    import random

    rng = random.Random(seed)
    res = BenchResult(
        endpoint="fake",
        workload={"name": "code", "prompts": n, "synthetic": False},
        settings={"requests": n, "seed": 0},
    )
    for k, c in enumerate(levels):
        recs = []
        rate = speed * (1 - slowdown_per_level * k)
        for i in range(n):
            chunks = 12 // multi
            gap = multi / rate * (1 + 0.05 * rng.random())
            acc = (multi - 1) * chunks if multi > 1 else None
            recs.append(
                record(
                    i,
                    start=i * 0.01,
                    ttft=0.05,
                    gaps=[gap] * (chunks - 1),
                    tokens=[multi] * chunks,
                    accepted=acc,
                    drafted=(multi + 1) * chunks if multi > 1 else None,
                    concurrency=c,
                )
            )
        res.levels.append(LevelResult(c, None, recs, duration=2.0))
    return res


# --------------------------------------------------------------------------- a fake endpoint


class FakeEndpoint:
    """In-process Endpoint: streams `chunks` chunks of `k` tokens `delay` s apart.

    fail_after: requests after this many raise ConnectionLost and alive() turns False
    (a server that died); hang: requests never complete (a stuck server).
    """

    def __init__(
        self,
        *,
        chunks: int = 4,
        k: int = 2,
        delay: float = 0.002,
        fail_after: int | None = None,
        hang: bool = False,
        alive: bool = True,
        fail_kind: str = "connection",
    ):
        self.name = "fake://endpoint"
        self.chunks, self.k, self.delay = chunks, k, delay
        self.fail_after, self.hang, self._alive, self.fail_kind = fail_after, hang, alive, fail_kind
        self.sent: list[tuple[str, int]] = []
        self.inflight = 0
        self.max_inflight = 0
        self.checked = False

    async def check(self) -> None:
        self.checked = True

    async def alive(self) -> bool:
        return self._alive

    async def stream(self, prompt, *, seed, sampling):
        from toolkit.client import ClientError, ConnectionLost

        self.sent.append((prompt.text, seed))
        n = len(self.sent)
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            if self.fail_after is not None and n > self.fail_after:
                self._alive = False
                if self.fail_kind == "connection":
                    raise ConnectionLost("the gRPC connection was lost mid-request: Socket closed")
                raise ClientError("fake: model error")
            for i in range(self.chunks):
                await asyncio.sleep(self.delay)
                if self.hang:
                    await asyncio.sleep(3600)
                yield Chunk(
                    time=time.monotonic(),
                    text="x" * self.k,
                    outputs={
                        "num_output_tokens": self.k,  # per response (docs/contracts.md)
                        "total_accepted_draft_tokens": (i + 1) * (self.k - 1),
                        "total_draft_tokens": (i + 1) * 3,
                    },
                )
        finally:
            self.inflight -= 1

    async def close(self) -> None:
        return None


@pytest.fixture
def fake_endpoint():
    return FakeEndpoint
