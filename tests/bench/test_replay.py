"""Acceptance per draft position for `bench --compare`'s speculative side, replayed in process
(toolkit/bench/measure/replay.py): against the runtime's own statistics, and against a real server's
counters for the same requests."""

from __future__ import annotations

import pytest

from toolkit.bench.api import bench
from toolkit.bench.measure.inprocess import encode, load_runtime
from toolkit.bench.measure.metrics import per_position_acceptance
from toolkit.bench.measure.replay import replay_acceptance, replayable
from toolkit.bench.measure.workloads import load_workload
from toolkit.bench.targets import deployed_address
from toolkit.recipe import load_recipe


def test_replay_sums_the_runtimes_own_statistics():
    rec = load_recipe("tiny-eagle3")
    prompts = load_workload("code", max_tokens=24, seed=0).sample(3, 0)
    rp = replay_acceptance(rec, prompts)
    rt = load_runtime(rec)
    proposed, accepted, drafted = [0, 0, 0], [0, 0, 0], 0
    for p in prompts:
        st = rt.generate(encode(rt, p.text), 24, spec=rec.speculative).stats
        drafted += st.draft_tokens
        for i, n in enumerate(st.per_position_proposed):
            proposed[i] += n
        for i, n in enumerate(st.per_position_accepted):
            accepted[i] += n
    assert rp.requests == 3 and rp.draft_tokens == drafted == sum(proposed) and drafted > 0
    assert rp.per_position == per_position_acceptance(proposed, accepted) and len(rp.per_position) == 3
    assert rp.matches_server is None  # no server records given
    assert replayable(rec, None) and replayable(rec, 0.0)
    assert not replayable(rec, 0.8) and not replayable(load_recipe("tiny-baseline"), None)
    assert not replayable(load_recipe("llama-3.1-8b-eagle3"), None)  # engine/llmapi backends: no replay


@pytest.mark.tritonserver
@pytest.mark.slow
@pytest.mark.parametrize(
    "served", ["tiny-ngram", "tiny-draft-target", "tiny-sa", "tiny-pard", "tiny-mtp"], indirect=True
)
def test_replay_equals_the_servers_counters(served, tmp_path):
    """tiny-draft-target: the replay runs the BLS loop (target decodes len(draft) + 1 tokens per
    iteration), which proposes fewer drafts than the in-process speculator would. SA, PARD and MTP
    run in the served model's own speculator, as in process. The deployment is shared
    (tests/conftest.py `served`): acceptance is per request, whatever ran before (tiny-sa's global
    pool is off, so earlier requests leave nothing behind)."""
    rec, d = served
    url, model = deployed_address(d, "grpc")
    res = bench(
        url,
        model=model,
        workload="code",
        max_tokens=32,
        concurrency=[1],
        requests=4,
        warmup=0,
        progress=False,
        tokenizer=str(rec.local_path(rec.models.target)),
        report_dir=tmp_path / "reports",
    )
    prompts = load_workload("code", max_tokens=32, seed=0).sample(4, 0)
    rp = replay_acceptance(rec, prompts, res.levels[0].records)
    assert rp.server_draft_tokens == sum(r.draft_tokens for r in res.levels[0].records) > 0
    assert rp.matches_server, (rp.accepted_draft_tokens, rp.draft_tokens, rp.server_accepted_draft_tokens)
    # Acceptance per draft position: one figure per position proposed, up to the draft length.
    assert 1 <= len(rp.per_position) <= rec.speculative.max_draft_len
    assert all(0.0 <= a <= 1.0 for a in rp.per_position) and rp.per_position[0] > 0
