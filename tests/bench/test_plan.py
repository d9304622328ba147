"""`plan`: the probe on small random checkpoints (fast, no trained models needed), and the
sizing / assumed-α path for hub recipes that cannot run here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from toolkit.bench.api import plan
from toolkit.bench.decide.candidates import probe_candidates
from toolkit.bench.decide.inflight import simulate_bls, simulate_closed_loop
from toolkit.bench.decide.predict import PlanResult, recommend, verify_widths
from toolkit.bench.decide.runs import (
    bls_fills,
    proposals,
    run_lengths,
    simulate_tau,
    step_count,
    step_widths,
)
from toolkit.bench.decide.timing import StepTiming, fit_kappa, interpolate, isotonic
from toolkit.bench.measure.workloads import load_workload
from toolkit.bench.options import RunOptions
from toolkit.bench.report import render
from toolkit.errors import UsageError

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "class Stack:\n    def push(self, item):\n        self.items.append(item)\n",
    "for i in range(10):\n    print(i * i)\n",
    "import os\nimport sys\n\ndef main():\n    return 0\n",
] * 8


def _tokenizer(path: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(TEXTS, trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>").save_pretrained(path)
    return tok.get_vocab_size()


def _model(path: Path, vocab: int, hidden: int, layers: int, seed: int) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=0,
        eos_token_id=1,
    )
    LlamaForCausalLM(cfg).save_pretrained(path)


@pytest.fixture(scope="module")
def random_models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("random_models")
    vocab = _tokenizer(root / "target")
    _model(root / "target", vocab, 64, 2, seed=0)
    # A draft identical to the target: every draft token is accepted (α = 1 exactly).
    shutil.copytree(root / "target", root / "same")
    _model(root / "other", vocab, 32, 1, seed=1)
    shutil.copy(root / "target" / "tokenizer.json", root / "other" / "tokenizer.json")
    shutil.copy(root / "target" / "tokenizer_config.json", root / "other" / "tokenizer_config.json")
    return root


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread: tiny models gain nothing from more, and on a busy machine OpenMP
    threads spin-waiting for each other make every forward 10-100× slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _recipe(root: Path, name: str, body: str) -> Path:
    p = root / f"{name}.yaml"
    p.write_text("backend: reference\ndtype: float32\nbuild: {max_input_len: 128, max_seq_len: 256}\n" + body)
    return p


def test_probe_draft_target_identical_draft(random_models, tmp_path):
    r = _recipe(
        random_models,
        "same",
        "models: {target: ./target, draft: ./same}\nspeculative: {mode: draft_target, max_draft_len: 2}\n",
    )
    p = plan(
        r,
        workload="code",
        probe_prompts=3,
        probe_tokens=12,
        draft_len_max=3,
        concurrency=(1, 2),
        progress=False,
    )
    assert isinstance(p, PlanResult) and p.probe is not None
    assert p.basis.startswith("measured") and p.batching == "inflight"
    # γ=3 gives acceptance at every position; γ=2 and γ=1 add measured step times.
    assert [c.label for c in p.probe.configs] == ["γ=3", "γ=2", "γ=1"]
    cfg = p.probe.configs[0]
    assert cfg.label == "γ=3" and cfg.acceptance_rate == 1.0
    assert cfg.per_position_acceptance == [1.0, 1.0, 1.0]
    assert cfg.marginals == pytest.approx([cfg.accepted_tokens / cfg.steps / 3] * 3)  # per step, 3 positions
    assert p.probe.alpha_greedy.point == 1.0
    assert p.probe.alpha_logits.point == pytest.approx(1.0, abs=1e-5)  # Σ min(p, p) = 1
    assert p.probe.timing.c_forward > 0 and p.probe.timing.t_base > 0
    # The step's own work (ForwardTimer: outside the target's forwards) holds the draft model's
    # forwards here; a plain step's is sampling and bookkeeping.
    assert all(0 < c.t_own < c.t_step for c in p.probe.configs)
    # Each step's verify forward (its last target forward) ran its γ drafts and one more; the
    # last step of a request fewer, when fewer tokens were left.
    for c in p.probe.configs:
        assert sum(w - 1 for ws in c.step_widths for w in ws) == c.draft_tokens
        assert max(w for ws in c.step_widths for w in ws) == c.settings["max_draft_len"] + 1
    assert 0 <= p.probe.timing.t_own_base < p.probe.timing.t_base
    assert [pr.draft_len for pr in p.predictions] == [1, 2, 3]
    assert [pr.expected_tokens for pr in p.predictions] == [2.0, 3.0, 4.0]
    assert [pr.expected_tokens_iid for pr in p.predictions] == pytest.approx([2.0, 3.0, 4.0])
    t = p.probe.timing
    assert sorted(t.batch_points) == [1, 2, 3, 4]  # plain, and γ+1 tokens per row for γ = 1..3
    assert all(
        [b for b, _ in pts] == [1, 2, 4, 8, 16] and all(x > 0 for _, x in pts)
        for pts in t.batch_points.values()
    )
    # Draft-target is served through the BLS loop (reference repository): at 2 loops its costs
    # come from replaying the loops in the batcher over the probe's requests. Every draft is
    # accepted, so no iteration has a fill step, and the loops, away for the same draft, share
    # every forward of their first requests; then the third request (as long) runs alone.
    runs = [run_lengths(st, 3, 1.0) for st in cfg.step_tokens]
    for pr in p.predictions:
        g = pr.draft_len
        fills = [bls_fills(r, g) for r in runs]
        assert not any(any(f) for f in fills)
        step = next(c.t_step for c in p.probe.configs if c.settings["max_draft_len"] == g)
        costs = t.bls_costs(g, 2, step, fills)
        assert costs.loops is not None and (costs.loops.rows, costs.loops.one_row) == (1.5, 0.5)
        assert pr.throughput[2] == pytest.approx(t.bls_speedup_at(pr.expected_tokens, g, 2, costs))
        # The reported speedup is per request, each request's time holding the prefills (its
        # own and, at 2 rows, the other's): diluted towards 1 from the per-step rule, as served.
        for b in (1, 2):
            assert min(1.0, pr.throughput[b]) <= pr.speedup[b] <= max(1.0, pr.throughput[b])
    assert p.recommendation is not None and p.recommendation.schedule is not None
    d = p.to_dict()
    json.dumps(d)
    assert d["recommendation"]["overlay"]["speculative"]["max_draft_len"] in (1, 2, 3)
    text = render(p)
    assert "α greedy" in text and "predicted speedup" in text


def test_probe_with_gpu_adds_sizing_and_roofline(random_models):
    r = _recipe(
        random_models,
        "other",
        "models: {target: ./target, draft: ./other}\nspeculative: {mode: draft_target, max_draft_len: 2}\n",
    )
    p = plan(
        r,
        workload="code",
        gpu="h100",
        probe_prompts=2,
        probe_tokens=8,
        draft_len_max=2,
        concurrency=(1, 64),
        temperature=0.7,
        progress=False,
    )
    assert p.probe.alpha_logits_temperature == 0.7
    assert 0 <= p.probe.alpha_logits.point <= 1
    assert p.sizing is not None and p.sizing.fits[0].fits
    assert p.sizing.components[0].facts_source.startswith("config.json (")
    assert [x.draft_len for x in p.roofline_predictions] == [1, 2]
    assert p.assumed  # Leviathan table for assumed α, labelled
    assert all(a.source.startswith("assumed α=") for a in p.assumed)


def test_probe_runs_each_prompt_to_its_own_max_tokens(random_models, tmp_path, monkeypatch):
    """probe_tokens=None (what `tune` asks for): the probe generates exactly the requests a
    served run of the workload sends, the same prompts in the same order, each to its own
    max_tokens, so plan's τ is measured on the text the served A/B measures. And it times
    them on the threads a reference deployment's model instance runs on (SDTK_REFERENCE_THREADS)."""
    monkeypatch.setenv("SDTK_REFERENCE_THREADS", "2")
    r = _recipe(
        random_models, "ng", "models: {target: ./target}\nspeculative: {mode: ngram, max_draft_len: 2}\n"
    )
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text(
        '{"prompt": "def add(a, b): return a + b", "max_tokens": 5}\n'
        '{"prompt": "for i in range(10): print(i)", "max_tokens": 11}\n'
    )
    p = plan(
        r,
        prompts_file=jsonl,
        probe_prompts=2,
        probe_tokens=None,
        draft_len_max=2,
        concurrency=(1,),
        progress=False,
    )
    wl = load_workload(prompts_file=jsonl)
    want = [q.max_tokens for q in wl.sample(2, 0)]
    for cfg in p.probe.configs:
        assert [sum(t) for t in cfg.step_tokens] == want
    assert p.probe.new_tokens == 11 and p.probe.prompts == 2
    assert p.probe.threads == 2
    # Each prompt's prefill, timed from its plain generation, and kept in the JSON.
    assert len(p.probe.prefill) == 2 and all(x > 0 for x in p.probe.prefill)
    assert p.to_dict()["probe"]["prefill"] == p.probe.prefill


def test_batched_points_time_the_served_batched_forward(monkeypatch):
    """plan's batch dimension is timed on the forward the reference deployment's batcher runs
    (batching.batched_forward over KV slots), not on a stand-in: each timed call carries `b`
    rows of `w` tokens after the context, and returns what a served forward returns."""
    from toolkit.bench.measure import inprocess
    from toolkit.reference import ReferenceRuntime, batching

    rt = ReferenceRuntime.load(Path("models/tiny/target"))
    seen: list[tuple[int, ...]] = []
    real = batching.batched_forward

    def spy(pool, steps):
        seen.append(tuple(len(s.ids) for s in steps))
        outs = real(pool, steps)
        assert all(o.logits is not None for o in outs)
        return outs

    monkeypatch.setattr(batching, "batched_forward", spy)
    ctx = rt.tokenizer("def add(a, b):\n    return a + b")["input_ids"]
    pts = inprocess.time_batched_forwards(rt.target, ctx, [1, 3], batches=(1, 2), repeats=1)
    assert seen[:2] == [(len(ctx),), (len(ctx),)]  # each row's slot prefilled once
    assert sorted(set(seen[2:])) == [(1,), (1, 1), (3,), (3, 3)] and len(seen) == 2 + 2 * 4
    assert sorted(pts) == [1, 3] and [b for b, _ in pts[3]] == [1, 2]
    assert all(t > 0 for w in pts for _, t in pts[w])


def test_probe_ngram_and_lookahead(random_models):
    r = _recipe(
        random_models, "ng", "models: {target: ./target}\nspeculative: {mode: ngram, max_draft_len: 2}\n"
    )
    p = plan(
        r,
        workload="summarization",
        probe_prompts=2,
        probe_tokens=10,
        draft_len_max=3,
        concurrency=(1, 2),
        progress=False,
    )
    assert p.probe.configs[0].shape.draft_forwards == 0
    # With each request's prefill timed, the speedup is the closed loop replayed in the batcher
    # (StepTiming.replay_speedup), here for the probed γ = 3: each request in its own steps.
    t, cfg = p.probe.timing, p.probe.configs[0]
    assert len(p.probe.prefill) == 2 and 0 <= cfg.t_own < cfg.t_step
    widths = verify_widths(cfg, 3)
    runs = [run_lengths(st, 3, 1.0) for st in cfg.step_tokens]
    loop = [(len(r), step_count(r, 3)) for r in runs]
    # Each step's verify forward, recorded (ForwardTimer): its proposal and one more, so the
    # widths add up to the runtime's own count of proposed tokens, one per step.
    for c in p.probe.configs:
        assert [len(w) for w in c.step_widths] == [len(st) for st in c.step_tokens]
        assert sum(w - 1 for ws in c.step_widths for w in ws) == c.draft_tokens
    assert {w for ws in cfg.step_widths for w in ws} <= {1, 2, 3, 4}
    # At the probed γ the replayed steps are the probe's own, each as wide as it ran.
    pairs = zip(runs, cfg.step_tokens, cfg.step_widths, strict=True)
    wide = [step_widths(r, proposals(st, sw), 3) for r, st, sw in pairs]
    assert wide == cfg.step_widths
    p3 = next(x for x in p.predictions if x.draft_len == 3)
    # The bench run predicted sends `sdtk bench`'s default requests per level: the two probed
    # ones in turn, replayed with that many.
    assert p.requests == RunOptions().requests == p.to_dict()["requests"]
    assert any(f"closed loop of {p.requests} requests per level" in n for n in p.notes)
    for b in (1, 2):
        want = _replay(
            t,
            loop,
            p.probe.prefill,
            t_step=cfg.t_step,
            width=4,
            batch=b,
            widths=widths,
            t_own=cfg.t_own,
            count=p.requests,
            step_widths=wide,
        )
        assert p3.speedup[b] == pytest.approx(want)
    assert [x.draft_len for x in p.predictions] == [1, 2, 3]
    r = _recipe(
        random_models,
        "la",
        "models: {target: ./target}\n"
        "speculative: {mode: lookahead, window: 3, ngram: 3, verification_set: 2}\n",
    )
    p = plan(r, workload="code", probe_prompts=1, probe_tokens=8, concurrency=(1,), progress=False)
    labels = [c.label for c in p.probe.configs]
    assert labels[0] == "W=3 N=3 G=2" and len(labels) == 4
    assert p.recommendation is not None and "window" in p.recommendation.settings
    assert p.recommendation.schedule is None


def test_hub_recipe_gets_sizing_and_assumptions_only():
    p = plan("llama-3.3-70b-draft-target", gpu="h200", concurrency=(1, 8, 64), progress=False, fetch="none")
    assert p.probe is None and not p.predictions and p.recommendation is None
    assert p.basis.startswith("roofline (H200")
    assert any("no acceptance probe" in n for n in p.notes)
    assert any("illustration, not a prediction" in n for n in p.notes)
    assert any("does not fit on 4×" in n for n in p.notes) is False  # recipe tp=4 fits on H200
    assert [a.source for a in p.assumed] == [
        "assumed α=0.6",
        "assumed α=0.7",
        "assumed α=0.8",
        "assumed α=0.9",
    ]
    best = p.assumed[-1]
    assert best.speedup[1] > best.speedup[64]  # speculation pays less as the batch grows
    assert "ASSUMED acceptance" in render(p)
    p2 = plan("llama-3.1-8b-baseline", concurrency=(1,), progress=False, fetch="none")
    assert p2.sizing is not None and p2.sizing.gpu.key == "h100"
    assert any("no --gpu given" in n for n in p2.notes) and any("mode none" in n for n in p2.notes)


def test_bad_inputs():
    with pytest.raises(UsageError, match="draft_len_max"):
        plan("tiny-draft-target", draft_len_max=0, progress=False)
    with pytest.raises(UsageError, match="positive integers"):
        plan("tiny-draft-target", concurrency=(0,), progress=False)
    with pytest.raises(UsageError, match="cannot probe"):
        plan("llama-3.1-8b-eagle3", probe=True, progress=False, fetch="none")
    with pytest.raises(UsageError, match="unknown GPU"):
        plan("llama-3.1-8b-eagle3", gpu="h900", progress=False, fetch="none")


def test_helpers():
    assert fit_kappa([(1, 1.0), (3, 1.2), (5, 1.4)]) == pytest.approx(0.1)
    assert fit_kappa([(1, 1.0), (4, 0.9)]) == 0.0
    iso = isotonic([(1, 1.0), (2, 1.4), (3, 1.2), (5, 2.0)])
    assert [n for n, _ in iso] == [1, 2, 3, 5]
    assert [t for _, t in iso] == pytest.approx([1.0, 1.3, 1.3, 2.0])
    # Step widths at another γ: a probe at γ = 3 whose steps committed 1, 4 and 2 tokens and
    # verified 1, 4 and 2 (proposed nothing; 3, all accepted; 1 with one token left, all
    # accepted). From inside an accepted run the proposer offers what it offered from its root.
    offered = proposals([1, 4, 2], [1, 4, 2])
    assert offered == [0, 3, 3, 3, 3, 1, 1]
    r3 = run_lengths([1, 4, 2], 3, p_tail=0.5)
    assert step_widths(r3, offered, 3) == [1, 4, 2]  # the probe's own steps
    assert step_widths(r3, offered, 1) == [1, 2, 2, 2] and step_count(r3, 1) == 4
    with pytest.raises(ValueError):
        proposals([1, 4], [1])
    with pytest.raises(ValueError):
        step_widths(r3, offered[:-1], 3)
    # Run lengths: steps at γ_max=4 committing 3 (2 accepted), 5 (all 4: censored), 1 tokens.
    r = run_lengths([3, 5, 1], 4, p_tail=0.5)
    assert r[:3] == [2, 1, 0]
    assert r[3:8] == pytest.approx([4 + 0.5, 3.5, 2.5, 1.5, 0.5])  # continues with p=0.5 into R=0
    assert r[8:] == [0]
    assert simulate_tau([[2, 1, 0, 0]], 1) == pytest.approx(4 / 3)  # steps commit 2, 2... capped at the end
    assert simulate_tau([run_lengths([3, 1, 2], 2, 0.0)], 2) == pytest.approx(6 / 3)  # replays γ_max itself
    # The BLS loop verifies from every (γ+1)-th root, whatever was rejected: from 0 (2 tokens)
    # and 4 (all 3 drafts + 1), stepping over the hard roots 2 and 3 the speculative loop stops at.
    hard = [1, 0, 0, 0, 3, 2, 1, 0]
    assert simulate_tau([hard], 3) == pytest.approx(8 / 4)
    assert simulate_tau([hard], 3, bls=True) == pytest.approx(6 / 2)
    assert simulate_tau([[3, 2, 1, 0, 3, 2]], 3, bls=True) == pytest.approx(6 / 2)  # the last one capped
    # The BLS iterations' plain fill steps: γ + 1 tokens an iteration, the first τ verified.
    assert bls_fills(hard, 3) == [2, 0]  # 2 verified + 2 plain, then all 4 verified
    assert bls_fills([3, 2, 1, 0, 3, 2], 3) == [0, 0]  # 4 verified, then the last 2 (capped)
    assert bls_fills([0, 0, 0, 0, 0], 3) == [3, 0]  # 1 verified + 3 plain, then 1 token left


def test_bls_loops_fall_out_of_step_in_the_batcher():
    """inflight.simulate_bls replays the reference batcher's rules (batching.Batcher, as
    TensorRT-LLM's in-flight scheduler): a forward runs every request in the batch, one that joins
    during a forward waits for it, a BLS loop leaves after its fills to draft. Traced by hand:
    γ = 1, a verify forward (2 tokens) costs 2 s and a plain one 1 s at any rows, 0.5 s away.

    t=0.5  both back; verify A+B (2 rows) → 2.5: B has no fill, leaves (back at 3.0); A has 1
    t=2.5  A's fill alone → 3.5: A leaves (back at 4.0)
    t=3.5  B (back since 3.0, waited 0.5) verifies alone → 5.5: B's request is done
    t=5.5  A (back since 4.0, waited 1.5) verifies alone → 7.5, then its fill → 8.5: done."""
    costs = simulate_bls(
        [[1, 1], [0, 0]], loops=2, draft_len=1, away=0.5, forward=lambda w, r: 2.0 if w > 1 else 1.0
    )
    assert costs.verify == pytest.approx((2.0 + 2.0 + 2.5 + 3.5) / 4)  # waits included
    assert costs.fill == pytest.approx(1.0)
    assert (
        costs.forwards == 5 and costs.one_row == pytest.approx(4 / 5) and costs.rows == pytest.approx(6 / 5)
    )
    # Loops that never leave out of step (no fills, the same away) share every forward, and a
    # fill rides in a forward padded to a verify row beside it.
    same = simulate_bls([[0, 0]] * 4, loops=2, draft_len=3, away=0.1, forward=lambda w, r: w * (1 + r / 10))
    assert same.one_row == 0.0 and same.verify == pytest.approx(4 * 1.2)
    mixed = simulate_bls([[1], [0, 0]], loops=2, draft_len=3, away=0.0, forward=lambda w, r: w * (1 + r / 10))
    assert mixed.fill == pytest.approx(4 * 1.2)  # A's fill beside B's second verify
    # One loop: each iteration its verify forward alone, each fill a plain forward alone.
    alone = simulate_bls([[2, 1, 0]], loops=1, draft_len=2, away=9.0, forward=lambda w, r: float(w))
    assert (alone.verify, alone.fill, alone.one_row, alone.forwards) == (3.0, 1.0, 1.0, 6)
    # Fewer requests than loops: repeated, each copy one iteration further on, so every loop has
    # one (plan prices the plain side at that many rows).
    busy = simulate_bls([[0]], loops=4, draft_len=1, away=0.0, forward=lambda w, r: 1.0)
    assert (busy.rows, busy.forwards) == (4.0, 1)
    for bad in ({"loops": 0, "away": 0.0}, {"loops": 1, "away": float("nan")}):
        with pytest.raises(ValueError):
            simulate_bls([[0]], draft_len=1, forward=lambda w, r: 1.0, **bad)
    with pytest.raises(ValueError, match="no BLS iterations"):
        simulate_bls([[]], loops=1, draft_len=1, away=0.0, forward=lambda w, r: 1.0)
    assert interpolate([(1, 10.0), (8, 17.0)], 4) == pytest.approx(13.0)
    assert interpolate([(4, 12.0), (8, 16.0)], 2) == pytest.approx(10.0)
    # Step times measured at γ = 1, 2, 3 where γ = 2 is dearer (a slow 3-token kernel): the
    # monotone fit pools 2 and 3; the points as measured keep each its own.
    steps = [(1, 89.0), (2, 126.0), (3, 86.0)]
    assert interpolate(steps, 3) == pytest.approx(106.0)
    assert interpolate(steps, 3, monotone=False) == 86.0 and interpolate(steps, 2, monotone=False) == 126.0

    from toolkit.recipe import load_recipe

    # Medusa candidates: valid sub-trees (parents first) made of prefixes of the recipe's tree, up to all of it.
    tree = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [2, 0], [0, 2], [0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0]]
    med = load_recipe("tiny-medusa", [f"speculative.medusa_choices={tree}"])
    cands = probe_candidates(med, 8)
    assert [len(c[1]["medusa_choices"]) for c in cands] == [3, 6, 9, 12]
    assert cands[-1][1]["medusa_choices"] == tree and cands[0][1]["medusa_choices"] == tree[:3]
    shipped = load_recipe("tiny-medusa").speculative.medusa_choices
    assert probe_candidates(load_recipe("tiny-medusa"), 8)[-1][1]["medusa_choices"] == shipped
    assert recommend([], "draft_target", [1], "x") is None


def test_batch_scale_from_batched_forward_times():
    """At b rows a plain step takes t(b, 1) and a verify step t(b, γ+1): the speedup at 1 is
    scaled by their growths' ratio; beyond max_batch_size the batch stops growing (queueing)."""
    t = StepTiming(t_base=1.0, forward_points=[(1, 1.0)])
    assert t.batch_scale(5, 8) == 1.0  # nothing measured: no batch term
    t.batch_points = {
        1: [(1, 1.0), (2, 1.1), (4, 1.2), (8, 2.0)],  # plain: memory-bound until 4 rows
        5: [(1, 1.5), (2, 2.0), (4, 3.0), (8, 6.0)],  # 5 tokens per row: compute-bound sooner
    }
    assert t.batch_scale(5, 1) == 1.0
    assert t.batch_scale(5, 8) == pytest.approx((2.0 / 1.0) / (6.0 / 1.5))
    # Width 4, between the measured 1 and 5: linear in the width, 3/4 of the way.
    assert t.batch_scale(4, 8) == pytest.approx(2.0 / ((0.25 * 2.0 + 0.75 * 6.0) / (0.25 + 0.75 * 1.5)))
    # Rows whose width varies (n-gram proposes 0 or 4 tokens, half the time each): two rows are
    # padded to the wider, so they cost t(2, 5) unless both are plain (1/4), against a row alone
    # at its mean cost.
    dist = [0.5, 0.0, 0.0, 0.0, 0.5]
    many, one = 0.25 * 1.1 + 0.75 * 2.0, 0.5 * 1.0 + 0.5 * 1.5
    assert t.batch_scale(5, 2, dist) == pytest.approx(1.1 / (many / one))
    assert t.batch_scale(5, 2, [0, 0, 0, 0, 1.0]) == pytest.approx(t.batch_scale(5, 2))  # every row full
    t.max_batch = 4
    assert t.batch_scale(5, 16) == t.batch_scale(5, 4) == pytest.approx((1.2 / 1.0) / (3.0 / 1.5))


def test_speedup_at_a_concurrency_grows_each_step_and_adds_that_levels_serving_cost():
    """At b rows the plain step is t_base × its growth, the speculative step t_step × its own,
    and the serving cost measured at b (each row gets its own response every step, so tune
    measures it per level) is added once per step to both; a level without a measurement takes
    the deployment's single figure. Draft-target's BLS loop: its iteration's costs at b loops
    come from replaying the loops in the target's batcher (`bls_costs`), the closed form at one."""
    from toolkit.bench.decide import costmodel as cm

    t = StepTiming(t_base=2.0, forward_points=[(1, 2.0)])
    t.batch_points = {1: [(1, 1.0), (4, 1.5)], 5: [(1, 1.2), (4, 2.4)]}
    t.serving_overhead, t.serving_by_concurrency = 0.5, {4: 1.5}
    assert t.growths(5, 4) == pytest.approx((1.5, 2.0))
    assert t.speedup_at(3.0, 2.6, 5, 4) == pytest.approx(3.0 * (2.0 * 1.5 + 1.5) / (2.6 * 2.0 + 1.5))
    assert t.speedup_at(3.0, 2.6, 5, 1) == pytest.approx(3.0 * (2.0 + 0.5) / (2.6 + 0.5))
    assert t.speedup_at(3.0, 2.6, 5, 2) == pytest.approx(
        3.0 * (2.0 * t.growths(5, 2)[0] + 0.5) / (2.6 * t.growths(5, 2)[1] + 0.5)
    )
    # Draft-target through the BLS loop: one loop is the closed form (t_step, t_base per fill).
    one = t.bls_costs(4, 1, 2.6, [[2, 2]])
    assert (one.step, one.fill, one.loops) == (2.6, 2.0, None)
    assert t.bls_speedup_at(3.0, 4, 1, one) == pytest.approx(cm.bls_loop_speedup(3.0, 4, 2.0, 2.6, 0.5))
    # Four loops: replayed in the batcher (inflight.simulate_bls) with the measured forwards
    # scaled to a step (t_base ÷ batch_cost(1, 1) = 2), away for the draft (t_step less its
    # verify forward, 2.6 − 2 × 1.2) and the serving cost at 4 (1.5). Their fills differ, so
    # they fall out of step: forwards run fewer than 4 rows, and a returning loop waits.
    fills = [[2, 0, 4], [1, 3], [0, 0, 2, 1], [3], [1, 1, 1]]
    four = t.bls_costs(4, 4, 2.6, fills)
    replay = simulate_bls(
        fills, loops=4, draft_len=4, away=0.2 + 1.5, forward=lambda w, r: 2.0 * t.batch_cost(w, r)
    )
    assert four.loops == replay
    assert four.step == pytest.approx(0.2 + replay.verify) and four.fill == pytest.approx(replay.fill)
    assert replay.one_row > 0 and replay.rows < 4 and replay.verify > 2.0 * t.batch_cost(5, 1)
    assert t.bls_speedup_at(3.0, 4, 4, four) == pytest.approx(
        5 * (2.0 * 1.5 + 1.5) / (four.step + 2 * four.fill + 1.5)
    )
    # Without a serving cost and with every row full, the in-process rule: S(1) × growth ratio.
    t.serving_overhead, t.serving_by_concurrency = 0.0, {}
    assert t.speedup_at(3.0, 2.6, 5, 4) == pytest.approx(3.0 * 2.0 / 2.6 * t.batch_scale(5, 4))


def test_plan_predicts_the_mean_of_per_request_rates_that_bench_compare_reports():
    """`bench --compare`'s speedup is the mean per-request output tok/s ÷ the baseline's, a
    request's rate being its tokens over its end-to-end time. Requests differ in τ, and a mean
    of rates is above the pooled ratio (Σ tokens ÷ Σ time): two requests of 20 tokens at τ 1.25
    and 4 pool to τ 1.905 (40 tokens in 16 + 5 steps) but average 2.625×.
    Prefill dilutes: a request's time also holds its prefill, its first response's serving cost
    and, at b rows, the b − 1 prefills that start beside it."""
    from toolkit.bench.decide import costmodel as cm
    from toolkit.bench.decide.costmodel import request_mean_speedup
    from toolkit.bench.decide.predict import Probe, ProbeConfig, predict_measured
    from toolkit.recipe import load_recipe

    same = request_mean_speedup([(20, 2.0), (20, 2.0)], lambda tau: tau, 1.0)
    assert same == pytest.approx(2.0)
    assert request_mean_speedup([(20, 1.25), (20, 4.0)], lambda tau: tau, 1.0) == pytest.approx(2.625)
    # With prefill (seconds) and a serving cost o = 0.5 at c=2: plain 1.5 s a token; request i
    # waits its own prefill + o + the other row's mean prefill, then n − 1 decode steps.
    first = [2.0 + 0.5 + 3.0, 4.0 + 0.5 + 3.0]
    base = 20 / (first[0] + 19 * 1.5) + 20 / (first[1] + 19 * 1.5)
    spec = 20 / (first[0] + 19 * 1.5 / 1.25) + 20 / (first[1] + 19 * 1.5 / 4.0)
    got = request_mean_speedup([(20, 1.25), (20, 4.0)], lambda tau: tau, 1.5, 0.5, 2, prefill=[2.0, 4.0])
    assert got == pytest.approx(spec / base)
    assert 1.0 < got < 2.625

    # Through predict_measured: a chain probe whose two prompts accept very differently. The
    # throughput is the pooled per-step rule; the speedup the mean of the two requests' own.
    steps = [[1] * 16, [4] * 5]  # 16 tokens in 16 steps; 20 in 5
    cfg = ProbeConfig(
        "γ=3", {"max_draft_len": 3}, cm.chain_shape(3, draft_forwards=0), 21, 36, 63, 15,
        [21, 21, 21], [5, 5, 5], 1.0, steps,
    )  # fmt: skip
    probe = Probe(2, 20, 0.0, {"name": "code"}, StepTiming(t_base=1.0, forward_points=[(1, 1.0)]), [cfg])
    rec = load_recipe("tiny-ngram")
    p3 = next(
        p
        for p in predict_measured(
            probe, "ngram", rec.speculative, draft_len_max=3, concurrency=[1], alpha=None
        )
        if p.draft_len == 3
    )
    assert p3.throughput[1] == pytest.approx(p3.expected_tokens) == pytest.approx(36 / 21)
    assert p3.speedup[1] == pytest.approx((1.0 + 4.0) / 2)


def test_verify_widths_from_the_probe_at_the_longest_draft():
    """A chain probe at γ = 3 over 10 steps proposed ≥1 token in 6, ≥2 in 3, 3 in 1: at γ = 3
    a step verifies 1, 2, 3 or 4 tokens with probabilities .4 .3 .2 .1; at γ = 2 the proposals
    of 3 are cut to 2."""
    from toolkit.bench.decide import costmodel as cm
    from toolkit.bench.decide.predict import ProbeConfig, verify_widths

    cfg = ProbeConfig(
        "γ=3", {"max_draft_len": 3}, cm.chain_shape(3), 10, 20, 10, 5, [6, 3, 1], [4, 1, 0], 1e-3
    )
    assert verify_widths(cfg, 3) == pytest.approx([0.4, 0.3, 0.2, 0.1])
    assert verify_widths(cfg, 2) == pytest.approx([0.4, 0.3, 0.3])
    assert verify_widths(cfg, 5) == pytest.approx([0.4, 0.3, 0.2, 0.1, 0.0, 0.0])


def test_recommended_overlay_is_a_valid_recipe_change():
    """The per-level winners become a draft_len_schedule under `speculative`, valid by TRT-LLM's
    rules (entry 1 = max_draft_len), with max_concurrency where speculation stops paying."""
    from toolkit.bench.decide.predict import Prediction, recommend
    from toolkit.recipe import load_recipe

    def pred(g: int, s: dict[int, float]) -> Prediction:
        return Prediction(f"γ={g}", {"max_draft_len": g}, g, 1.0, None, s)

    levels = [1, 4, 16]
    preds = [pred(1, {1: 1.3, 4: 1.2, 16: 0.9}), pred(3, {1: 1.6, 4: 1.1, 16: 0.7})]
    r = recommend(preds, "draft_target", levels, "measured")
    assert r is not None and r.schedule == {1: 3, 4: 1, 16: 0} and r.max_concurrency == 4
    spec = r.overlay["speculative"]
    assert spec == {"max_draft_len": 3, "draft_len_schedule": {1: 3, 4: 1, 16: 0}, "max_concurrency": 4}
    sets = [f"speculative.{k}={v}" for k, v in spec.items()]
    assert load_recipe("tiny-draft-target", sets).speculative.draft_len_schedule == {1: 3, 4: 1, 16: 0}
    never = recommend([pred(2, {1: 0.8, 4: 0.7, 16: 0.6})], "draft_target", levels, "measured")
    assert never is not None and "draft_len_schedule" not in never.overlay["speculative"]


def test_plan_on_the_memory_bound_twin_says_so(random_models, tmp_path):
    body = (
        "models: {target: ./target}\nspeculative: {mode: ngram, max_draft_len: 2}\nreference: {inflate: 2}\n"
    )
    p = plan(
        _recipe(random_models, "twin", body),
        workload="code",
        probe_prompts=2,
        probe_tokens=6,
        draft_len_max=1,
        concurrency=(1,),
        progress=False,
    )
    assert "memory-bound twin: target padded ×2, " in p.basis
    assert "memory-bound twin: target padded ×2, " in render(p)


def test_served_predictions_amortise_a_per_step_serving_cost():
    """A served step costs o beyond its forwards, plain or speculative: the served speedup is
    τ(t_base + o)/(t_step + o), between the in-process one (o = 0) and τ. `tune` measures o
    once per deployment (served baseline TPOT at c=1 − the probe's plain step) and re-predicts."""
    from toolkit.bench.decide import costmodel as cm
    from toolkit.bench.decide.plan import add_serving_overhead
    from toolkit.bench.decide.predict import PlanResult, Probe, ProbeConfig, predict_measured
    from toolkit.bench.decide.tune import serving_overheads
    from toolkit.bench.measure.loadgen import BenchResult, LevelResult
    from toolkit.recipe import load_recipe

    from .conftest import record

    assert cm.served_speedup(2.0, 1.0, 1.6) == pytest.approx(2.0 / 1.6)
    assert cm.served_speedup(2.0, 1.0, 1.6, 1000.0) == pytest.approx(2.0, rel=1e-3)
    with pytest.raises(ValueError, match="≥ 0"):
        cm.served_speedup(2.0, 1.0, 1.6, -1.0)
    # The served n-gram: in process 1.58 ms a plain step; γ=4 probed at τ 2.16, 2.46 ms.
    steps = [[3, 1, 5, 2]] * 4
    cfg = ProbeConfig(
        "γ=4", {"max_draft_len": 4}, cm.chain_shape(4, draft_forwards=0), 16, 44, 40, 28,
        [16, 12, 8, 4], [12, 8, 5, 3], 2.46e-3, steps,
    )  # fmt: skip
    timing = StepTiming(t_base=1.58e-3, forward_points=[(1, 1.5e-3)])
    probe = Probe(4, 11, 0.0, {"name": "code"}, timing, [cfg])
    rec = load_recipe("tiny-ngram")
    preds = predict_measured(probe, "ngram", rec.speculative, draft_len_max=4, concurrency=[1], alpha=None)
    result = PlanResult("tiny-ngram", "ngram", "reference", "measured", [1], probe=probe, predictions=preds)
    result.recommendation = recommend(preds, "ngram", [1], "measured")
    in_process = {p.draft_len: p.speedup[1] for p in preds}
    tau4 = next(p.expected_tokens for p in preds if p.draft_len == 4)
    assert in_process[4] == pytest.approx(tau4 * 1.58 / 2.46)
    # Served TPOT 4.37 ms at c=1 (docs/benchmarks.md, tiny-baseline): o = 4.37 − 1.58 ms.
    base = BenchResult("x", {"name": "code"}, {})
    base.levels.append(LevelResult(1, None, [record(i, gaps=[4.37e-3] * 9) for i in range(3)], 1.0))
    o = serving_overheads([base], result).get(1)
    assert o == pytest.approx(4.37e-3 - 1.58e-3, rel=1e-6)
    assert serving_overheads([BenchResult("x", {"name": "code"}, {})], result).get(1) is None  # no c=1 level
    # Several baseline runs (tune's, before and after its configurations): their mean TPOT.
    later = BenchResult("x", {"name": "code"}, {})
    later.levels.append(LevelResult(1, None, [record(i, gaps=[4.57e-3] * 9) for i in range(3)], 1.0))
    assert serving_overheads([base, later], result).get(1) == pytest.approx(4.47e-3 - 1.58e-3, rel=1e-6)
    add_serving_overhead(result, rec, o, "served baseline")
    served = {p.draft_len: p.speedup[1] for p in result.predictions}
    assert served[4] == pytest.approx(tau4 * 4.37 / (2.46 + 4.37 - 1.58))
    assert in_process[4] < served[4] < tau4
    assert "served: + 2.79 ms per step (served baseline)" in result.basis
    assert result.recommendation is not None and result.recommendation.basis == result.basis
    assert result.probe is not None and result.probe.timing.serving_overhead == o


def test_hub_eagle_tree_is_priced_per_tree_level_not_per_budget_token():
    """Without a probe, plan assumes a tree depth of 4 for tree modes; the EAGLE-1/2 head runs once
    per level (num_eagle_layers), so the roofline charges 4 head reads a step, not its 63-token
    budget (max_draft_len); Medusa's heads run once."""
    eagle = plan("vicuna-7b-eagle", gpu="h100", concurrency=(1,), progress=False, fetch="none")
    assert eagle.sizing is not None and eagle.sizing.draft_forwards == 4
    medusa = plan("vicuna-7b-medusa", gpu="h100", concurrency=(1,), progress=False, fetch="none")
    assert medusa.sizing is not None and medusa.sizing.draft_forwards == 1


def test_draft_target_through_the_bls_loop_pays_the_plain_fill():
    """The BLS asks the target for γ+1 tokens per iteration (upstream decode.py); after verifying
    (τ tokens) the target decodes plainly up to γ+1. Plan prices those E[γ+1−τ] plain steps for
    the engine/reference repositories, not for llmapi (one executor runs both models)."""
    from toolkit.bench.decide import costmodel as cm
    from toolkit.bench.decide.plan import bls_loop, predict_from_probe
    from toolkit.bench.decide.predict import PlanResult, Probe, ProbeConfig
    from toolkit.recipe import load_recipe

    # τ = 2 at γ=3 leaves 2 plain steps: 4 tokens for t_step + 2·t_plain.
    assert cm.bls_loop_speedup(2.0, 3, 1.0, 1.5) == pytest.approx(4.0 / 3.5)
    assert cm.bls_loop_speedup(2.0, 3, 1.0, 1.5, 0.5) == pytest.approx(4.0 * 1.5 / 4.0)
    assert cm.bls_loop_speedup(4.0, 3, 1.0, 1.5) == pytest.approx(cm.served_speedup(4.0, 1.0, 1.5))  # no fill
    steps = [[2, 1, 3, 2]] * 4  # τ = 2 per prompt
    cfg = ProbeConfig(
        "γ=3", {"max_draft_len": 3}, cm.chain_shape(3), 16, 32, 48, 16,
        [16, 8, 4], [8, 4, 2], 1.5e-3, steps,
    )  # fmt: skip
    probe = Probe(4, 8, 0.0, {"name": "code"}, StepTiming(t_base=1e-3, forward_points=[(1, 1e-3)]), [cfg])
    rec = load_recipe("tiny-draft-target")
    assert bls_loop(rec, "reference") and bls_loop(rec, "engine") and not bls_loop(rec, "llmapi")
    assert not bls_loop(load_recipe("tiny-draft-target", ["serving.repository=llmapi"]), "reference")
    assert not bls_loop(load_recipe("tiny-eagle3"), "reference")
    for backend, fills in (("reference", True), ("llmapi", False)):
        result = PlanResult("tiny-draft-target", "draft_target", backend, "", [1])
        predict_from_probe(result, rec, probe, draft_len_max=3, concurrency=[1], twin=None)
        p3 = next(p for p in result.predictions if p.draft_len == 3)
        tau = p3.expected_tokens
        want = cm.bls_loop_speedup(tau, 3, 1e-3, 1.5e-3) if fills else cm.served_speedup(tau, 1e-3, 1.5e-3)
        assert p3.speedup[1] == pytest.approx(want)
        assert ("BLS loop" in p3.source) is fills


def test_closed_loop_replays_the_batchers_rules():
    """inflight.simulate_closed_loop, traced by hand: 2 clients, 3 requests of 3, 1 and 1 decode
    steps, prompts of 0.5 s, an iteration over r rows costs r seconds.

    t=0    A and B join: both prompt steps (1.0 s, no decode rows) → 1.0
    t=1.0  A, B decode (2 rows) → 3.0: B is done, its client sends C
    t=3.0  C's prompt (0.5) beside A's step (1 row, 1.0) → 4.5
    t=4.5  A's last step and C's (2 rows) → 6.5: both done."""
    rows = lambda r, w: float(r)  # noqa: E731
    ends = simulate_closed_loop([3, 1, 1], clients=2, max_rows=None, prefill=[0.5] * 3, iteration=rows)
    assert ends == pytest.approx([6.5, 3.0, 3.5])  # C was sent at 3.0
    # max_rows: the third client's request waits for a place in the batch.
    capped = simulate_closed_loop([1, 1, 1], clients=3, max_rows=2, prefill=[0.0] * 3, iteration=rows)
    assert capped == pytest.approx([2.0, 2.0, 3.0])
    # One client: each request alone, its prompt then its steps.
    assert simulate_closed_loop(
        [2, 0], clients=1, max_rows=None, prefill=[1.0, 2.0], iteration=lambda r, w: 3.0
    ) == [
        pytest.approx(7.0),
        pytest.approx(2.0),
    ]
    # Widths: an iteration is as wide as its widest row's step. Two requests of 2 steps that
    # start together step together: widths 1 then 4 in both cost 1 + 4; crossed, 4 + 4.
    wide = lambda r, w: float(w)  # noqa: E731
    kw = {"clients": 2, "max_rows": None, "prefill": [0.0, 0.0], "iteration": wide}
    assert simulate_closed_loop([2, 2], widths=[[1, 4], [1, 4]], **kw) == pytest.approx([5.0, 5.0])
    assert simulate_closed_loop([2, 2], widths=[[1, 4], [4, 1]], **kw) == pytest.approx([8.0, 8.0])
    assert simulate_closed_loop([2, 2], **kw) == pytest.approx([2.0, 2.0])  # no widths: 1 token a step
    # Out of step: the second request, sent when the first ends, runs its steps alone.
    one = {**kw, "clients": 1}
    assert simulate_closed_loop([2, 1], widths=[[1, 4], [3]], **one) == pytest.approx([5.0, 3.0])
    for bad in ({"clients": 0}, {"prefill": [0.0]}, {"widths": [[1]]}, {"widths": [[1], [1, 2]]}):
        with pytest.raises(ValueError):
            simulate_closed_loop(
                [1, 1], **{"clients": 1, "max_rows": None, "prefill": [0.0, 0.0], "iteration": rows, **bad}
            )


def _timing(**kw) -> StepTiming:
    """A plain step of 1 s whose batched forward grows 10% a row for any width: (plain, spec)
    growth from 1 row to r is 1 + (r − 1)/10 / 1.1 ... the same on both sides."""
    points = {w: [(r, w * (1 + r / 10)) for r in (1, 2, 4, 8)] for w in (1, 2, 4)}
    return StepTiming(t_base=1.0, forward_points=[(1, 1.0)], batch_points=points, **kw)


def test_replay_speedup_drains_the_batch():
    """StepTiming.replay_speedup: with every request alike (all start and end together) it is the
    closed form at every concurrency (each step at `batch` rows, costmodel.request_mean_speedup
    without prefill); with requests that finish unevenly the batch drains and the tail runs with
    fewer rows. `prefill` is the probe's time to the first token, which holds one plain step (the
    prompt step emits no token): the prompt step alone is prefill − t_base."""
    from toolkit.bench.decide import costmodel as cm

    t = _timing()  # t_base 1 s
    alike = [(9, 4)] * 8  # 9 tokens: 9 plain steps or 4 speculative ones after the prompt step
    for b in (1, 2, 4, 8):
        closed = cm.request_mean_speedup(
            [(9, 9 / 4)] * 8, lambda tau, b=b: t.speedup_at(tau, 1.5, 2, b), t.t_base * t.growths(1, b)[0]
        )
        assert _replay(t, alike, [1.0] * 8, t_step=1.5, width=2, batch=b) == pytest.approx(closed)
    # One client, a prompt step of 2 s: 2 + 9 × 1 s plainly, 2 + 4 × 1.5 s speculatively.
    assert _replay(t, [(9, 4)], [3.0], t_step=1.5, width=2, batch=1) == pytest.approx(11 / 8)
    # Uneven, traced by hand at 2 clients: 3 tokens each, 3 plain steps each (both rows
    # throughout), speculatively 1 and 2 steps: the second request's last step runs alone.
    g2 = 1.2 / 1.1  # growth from 1 row to 2 (any width)
    plain = 3 / (3 * g2)
    spec = (3 / (1.5 * g2) + 3 / (1.5 * g2 + 1.5)) / 2
    got = _replay(t, [(3, 1), (3, 2)], [1.0, 1.0], t_step=1.5, width=2, batch=2)
    assert got == pytest.approx(spec / plain)
    # Each row's own work (t_own) is paid once per row: at 2 rows it makes the speculative side dearer.
    assert _replay(t, [(3, 1), (3, 2)], [1.0, 1.0], t_step=1.5, width=2, batch=2, t_own=0.5) < got
    assert _replay(t, [(9, 4)], [1.0], t_step=1.5, width=2, batch=1, t_own=0.5) == pytest.approx(
        _replay(t, [(9, 4)], [1.0], t_step=1.5, width=2, batch=1)
    )  # one row: the same step, split differently
    # Fewer probed requests than clients: repeated, so 4 clients run 4 rows.
    one = _replay(t, [(3, 1)], [1.0], t_step=1.5, width=2, batch=4)
    assert one == pytest.approx((3 / (1.5 * t.growths(2, 4)[1])) / (3 / (3 * t.growths(1, 4)[0])))
    # `count`: the bench run's requests, the probed ones in order and then over again, from
    # offsets that weigh every probed request alike.
    uneven, pre = [(3, 1), (3, 2), (5, 2)], [1.0, 1.5, 2.0]
    kw = dict(t_step=1.5, width=2, batch=2)
    assert _replay(t, uneven, pre, count=3, **kw) == pytest.approx(_replay(t, uneven, pre, **kw))
    assert _replay(t, uneven, pre, count=6, **kw) == pytest.approx(_replay(t, uneven * 2, pre * 2, **kw))
    # One client: each request's rate is its own, so any count weighs them as the probe does.
    for count in (1, 2, 4, 5, 7):
        assert _replay(t, uneven, pre, t_step=1.5, width=2, batch=1, count=count) == pytest.approx(
            _replay(t, uneven, pre, t_step=1.5, width=2, batch=1)
        )
    # Traced by hand, 2 clients, count 3 of A = (3, 1) and B = (3, 2), prompt steps of 0 s: the
    # orders A B A and B A B. Plainly, in both, the first two run their 3 steps side by side (at
    # 2 rows) and end together; the third then runs its 3 steps alone.
    g2 = 1.2 / 1.1
    plain3 = (3 / (3 * g2) + 3 / (3 * g2) + 3 / 3) / 3
    # Speculatively, A ends after one step at 2 rows; the third joins (its prompt step) while B
    # runs its last step alone; then the third runs alone: A's one step, or B's two.
    aba = (3 / (1.5 * g2) + 3 / (1.5 * g2 + 1.5) + 3 / (1.5 + 1.5)) / 3
    bab = (3 / (1.5 * g2 + 1.5) + 3 / (1.5 * g2) + 3 / (1.5 + 3.0)) / 3
    got3 = _replay(t, [(3, 1), (3, 2)], [1.0, 1.0], t_step=1.5, width=2, batch=2, count=3)
    assert got3 == pytest.approx((aba + bab) / (2 * plain3))
    # Step widths (the probe's, replayed): an iteration is priced at its rows padded to their
    # widest step, the forward part of t_step scaled from one row at the probe's mean width.
    # Same width every step: what `growths` says for that width.
    same = [[2], [2, 2]]
    assert _replay(t, [(3, 1), (3, 2)], [1.0, 1.0], step_widths=same, **kw) == pytest.approx(
        _replay(t, [(3, 1), (3, 2)], [1.0, 1.0], **kw)
    )
    # Two requests of 6 tokens in 2 steps that verify 1 then 4 tokens, at 2 clients. One row's
    # forward costs w × 1.1 s (`_timing`), 2.75 s at the mean width; an iteration at 2 rows of
    # width w costs 1.5 × w × 1.2 / 2.75 s. In step (alike proposals at the same point of the
    # generations): 1.5 × 1.2 × (1 + 4) / 2.75 s each. Plainly, 6 steps of 1.2 / 1.1 s.
    plain6 = 6 * 1.2 / 1.1
    lock = 1.5 * 1.2 * 5 / 2.75
    two = [(6, 2), (6, 2)]
    kw2 = dict(t_step=1.5, width=4, batch=2)
    assert _replay(t, two, [1.0, 1.0], step_widths=[[1, 4], [1, 4]], **kw2) == pytest.approx(plain6 / lock)
    # Crossed, every iteration is padded to 4 tokens.
    crossed = 1.5 * 1.2 * 8 / 2.75
    assert _replay(t, two, [1.0, 1.0], step_widths=[[1, 4], [4, 1]], **kw2) == pytest.approx(plain6 / crossed)
    # Without them, the widest of 2 independent draws from the same widths (1 or 4, even odds):
    # 4 with probability 3/4.
    iid = 1.5 * (0.25 * 1.2 + 0.75 * 4.8) / 2.75 * 2
    half = [0.5, 0.0, 0.0, 0.5]
    assert _replay(t, two, [1.0, 1.0], widths=half, **kw2) == pytest.approx(plain6 / iid)
    assert plain6 / crossed < plain6 / iid < plain6 / lock
    with pytest.raises(ValueError, match="step_widths"):
        _replay(t, two, [1.0, 1.0], step_widths=[[1, 4], [1]], **kw2)
    with pytest.raises(ValueError, match="count"):
        _replay(t, uneven, pre, count=0, **kw)
    with pytest.raises(ValueError, match="prefill"):
        _replay(t, alike, [0.0], t_step=1.5, width=2, batch=1)
    with pytest.raises(ValueError, match="no requests"):
        _replay(t, [], [], t_step=1.5, width=2, batch=1)


def test_forward_timer_counts_the_targets_forwards_and_leaves_no_trace(random_models):
    """inprocess.ForwardTimer: the seconds inside CachedLM.run, _next and _rows (every entry of the
    generation loop), none outside; removed after, so the methods are the class's again."""
    from transformers import AutoModelForCausalLM

    from toolkit.bench.measure.inprocess import ForwardTimer
    from toolkit.reference.models import CachedLM

    lm = CachedLM(AutoModelForCausalLM.from_pretrained(random_models / "target").eval())
    with ForwardTimer(lm) as timer:
        lm.forward([1, 2, 3])
        after_forward, wide = timer.seconds, timer.last
        lm.greedy_chain([4], 3)
        after_chain = timer.seconds
        with torch.inference_mode():
            lm._rows([8, 9])  # the greedy chain path's entry (n-gram)
    assert 0 < after_forward < after_chain < timer.seconds
    assert (wide, timer.last) == (3, 2)  # the tokens of the latest forward
    assert not {"run", "_next", "_rows"} & set(vars(lm))
    before = timer.seconds
    lm.forward([5])
    assert timer.seconds == before
    # Nested: the inner timer restores the outer one's wrapper, and both count.
    with ForwardTimer(lm) as outer:
        with ForwardTimer(lm) as inner:
            lm.forward([6])
        lm.forward([7])
    assert 0 < inner.seconds < outer.seconds and "run" not in vars(lm)


def _replay(t, requests, prefill, *, batch, count=None, **step):
    """StepTiming.replay_speedup with the ReplayStep's fields as keywords."""
    from toolkit.bench.decide.timing import ReplayStep

    return t.replay_speedup(requests, prefill, ReplayStep(**step), batch=batch, count=count)
