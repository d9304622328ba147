"""The pieces of benchmarking a Dynamo deployment and of its failover that need no Dynamo install:
the worker counters read into a level's acceptance, their merge across rounds, the supervisor's
sweep of a dead worker's file-discovery entries, and what `status` says of a restarting worker."""

from __future__ import annotations

import json
import socket

import pytest
from prometheus_client import generate_latest

from toolkit.bench.measure.metrics import RequestRecord, merged_counts
from toolkit.bench.measure.openai import counters_delta, parse_spec_counters
from toolkit.bench.measure.records import LevelResult
from toolkit.dynamo.status import _last_failure
from toolkit.dynamo.supervisor import sweep_stale
from toolkit.dynamo.worker import Metrics
from toolkit.reference.stats import SpecStats


def _page(*steps: tuple[int, int]) -> str:
    """The /metrics page of an sdtk Dynamo worker (its real registry, not served) after
    requests whose chain steps are (proposed, committed)."""
    m = Metrics("tiny", -1)
    for proposed, committed in steps:
        st = SpecStats()
        st.record_chain(proposed, committed)
        m.observe(st, committed)
    return generate_latest(m.spec.registry).decode()


def test_worker_counters_become_the_levels_acceptance():
    before = [parse_spec_counters(_page()), parse_spec_counters(_page((3, 1)))]
    after = [
        parse_spec_counters(_page((3, 4), (3, 2))),  # accepted 3 + 1 of 6 drafts
        parse_spec_counters(_page((3, 1), (3, 3))),
    ]
    delta = counters_delta(before, after)
    assert delta["draft_tokens"] == 9 and delta["accepted_draft_tokens"] == 3 + 1 + 2
    assert delta["steps"] == 3 and delta["requests"] == 3
    assert delta["per_position_proposed"] == [3, 3, 3]
    assert delta["per_position_accepted"] == [3, 2, 1]
    level = LevelResult(2, None, [RequestRecord(index=0, start=0.0, end=1.0)], 1.0, server_acceptance=delta)
    acc = level.summary()["acceptance"]
    assert acc["rate"] == pytest.approx(6 / 9)
    assert acc["length"] == pytest.approx((6 + 3) / 3)
    assert acc["per_position"] == pytest.approx([1.0, 2 / 3, 1 / 3])
    assert "2 worker(s)" in acc["length_source"]
    assert level.to_dict()["server_acceptance"] == delta


def test_counts_of_two_rounds_add_up():
    a = {"draft_tokens": 6, "accepted_draft_tokens": 2, "steps": 2, "requests": 1,
         "per_position_proposed": [2, 2, 2], "per_position_accepted": [2]}  # fmt: skip
    b = {"draft_tokens": 3, "accepted_draft_tokens": 3, "steps": 1, "requests": 1,
         "per_position_proposed": [1, 1, 1], "per_position_accepted": [1, 1, 1]}  # fmt: skip
    m = merged_counts(a, b)
    assert m is not None
    assert (m["draft_tokens"], m["accepted_draft_tokens"], m["steps"]) == (9, 5, 3)
    assert m["per_position_accepted"] == [3, 1, 1]
    assert merged_counts(a, None) is None


def test_sweep_removes_only_the_entries_nobody_listens_on(tmp_path):
    inst, mdc = tmp_path / "v1" / "instances", tmp_path / "v1" / "mdc"
    inst.mkdir(parents=True)
    mdc.mkdir(parents=True)
    live = socket.socket()
    live.bind(("127.0.0.1", 0))
    live.listen()
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()
    try:
        for key, port in (
            ("sdtk%2Fbackend%2Fgenerate%2Faa", live.getsockname()[1]),
            ("sdtk%2Fbackend%2Fgenerate%2Fbb", dead_port),
        ):
            (inst / key).write_text(
                json.dumps({"transport": {"tcp": f"127.0.0.1:{port}/x/sdtk/backend/generate"}})
            )
            (mdc / key).write_text("{}")
        assert sweep_stale(tmp_path) == ["sdtk%2Fbackend%2Fgenerate%2Fbb"]
        assert (
            sorted(p.name for p in inst.iterdir())
            == sorted(p.name for p in mdc.iterdir())
            == ["sdtk%2Fbackend%2Fgenerate%2Faa"]
        )
    finally:
        live.close()


def test_status_says_how_a_restarting_worker_died():
    entry = {"failures": ["2026-12-07 18:00:00 worker-1 (pid 123) exited -9"]}
    assert _last_failure(entry) == "exited -9 at 2026-12-07 18:00:00"
    assert _last_failure({}) == "restarted"


def test_a_workers_per_request_counts_reach_the_bench_record():
    """The worker's final-chunk engine_data, as the frontend returns it in the response's
    nvext.engine_data, becomes the load generator's per-request acceptance."""
    from toolkit.bench.measure.loadgen import Chunk, _fill
    from toolkit.bench.measure.metrics import acceptance_length
    from toolkit.bench.measure.openai import request_acceptance
    from toolkit.dynamo.worker import ENGINE_DATA_KEY
    from toolkit.dynamo.worker import request_acceptance as worker_counts

    st = SpecStats()
    st.record_chain(3, 3)  # 2 of 3 drafts accepted, then the bonus token
    st.record_chain(3, 1)
    event = {"choices": [{"text": ""}], "nvext": {"engine_data": {ENGINE_DATA_KEY: worker_counts(st)}}}
    rec = RequestRecord(index=0, start=0.0)
    _fill(
        rec,
        [Chunk(time=1.0, text="ab", outputs={}), Chunk(time=2.0, text="", outputs=request_acceptance(event))],
    )
    assert (rec.accepted_draft_tokens, rec.draft_tokens, rec.steps) == (2, 6, 2)
    assert rec.per_position_proposed == [2, 2, 2] and rec.per_position_accepted == [1, 1]
    assert acceptance_length(rec) == (2.0, "server steps")
    assert request_acceptance({"choices": []}) == {}


def test_tune_over_the_openai_api_is_refused_with_what_to_do():
    from toolkit.bench.api import tune
    from toolkit.bench.options import RunOptions
    from toolkit.errors import UsageError

    with pytest.raises(UsageError, match="measures Triton deployments, not an OpenAI endpoint") as e:
        tune("http://127.0.0.1:9/v1", RunOptions(protocol="openai"), model="tiny-eagle3")
    assert "sdtk tune RECIPE" in (e.value.hint or "")
