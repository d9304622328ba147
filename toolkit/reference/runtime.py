"""ReferenceRuntime: load a target (plus a draft or heads) and generate with any speculative mode.

The runtime asks each mode's proposer (toolkit/reference/<mode>.py, chosen by the mode's name in
toolkit.reference.proposers) for its speculator and to load its weights; nothing here names a mode."""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from toolkit import modes
from toolkit.errors import GenerationError, ModelError
from toolkit.recipe import Speculative
from toolkit.reference import draft_target, proposers
from toolkit.reference.core import Context, Proposal, Speculator, Verdict, verify, verify_greedy
from toolkit.reference.core import verify as greedy_rule  # verify's rule, whatever `verify` is set to
from toolkit.reference.models import (
    CachedLM,
    TreeShape,
    argmax_list,
    inflate_mlp,
    is_chain,
    load_causal_lm,
    step_bytes,
    tree_shape,
)
from toolkit.reference.none import PlainSpeculator
from toolkit.reference.processors import Processors, Trace, tree_prefixes
from toolkit.reference.sampling import SamplingParams, generator
from toolkit.reference.stats import SpecStats
from toolkit.reference.steps import (
    Adaptive,
    GenerationResult,
    Request,
    adapt,
    chain_greedy,
    plain_greedy,
    take_tokens,
)

# The dtypes the runtime computes in: the recipe's `dtype` (the engine directory's
# pretrained_config.dtype). `auto` and float32 are the twin's exact default; bfloat16 and float16
# run the target, the draft and the heads in that dtype on CPU, so that the numerics-aware gate
# (docs/correctness.md) meets real tie-divergences. Logits are processed and sampled in float32.
DTYPES = {
    "auto": torch.float32,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}

# TEST-ONLY fault injection: with this variable set to 1 when a runtime loads (a served model
# inherits it from the server's environment), verification accepts every first-child draft
# without comparing it with the target's choice: a deliberately LOSSY deployment, for the tests
# that show the correctness gate rejecting one (tests/integration/test_served_gate_bf16.py). Never
# set it anywhere else; the runtime says so on stderr when it is on.
LOSSY_ENV = "SDTK_TEST_LOSSY_VERIFY"


def accept_every_draft(
    prop: Proposal, logits: torch.Tensor, sp: SamplingParams, gen: torch.Generator | None
) -> Verdict:
    """The lossy verifier of LOSSY_ENV: the first child at every level is taken unchecked, then
    the target's argmax after it (a broken verifier, kept for the tests only)."""
    first: dict[int, int] = {}
    for i in range(prop.num_draft):
        first.setdefault(prop.parents[i], i)
    node, path = -1, []
    while node in first:
        node = first[node]
        path.append(node)
    return Verdict(path, int(logits[node + 1].argmax()))


@dataclass
class VerifyResult:
    new_tokens: list[int]  # the accepted draft prefix plus one target token
    accepted: int
    drafted: int = 0  # draft tokens verified (a load-aware schedule may verify fewer than given)


def parse_speculative(data: dict[str, Any] | None) -> Any:
    """A recipe `speculative` section (defaults filled) as its typed model."""
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(Speculative).validate_python(data or {"mode": "none"})
    except ValidationError as e:
        raise ModelError(
            f"invalid speculative section: {e.errors()[0]['msg']}", hint="rebuild the engine directory"
        ) from None


# The section of plain decoding: generate(spec=PLAIN) turns speculation off for one call.
PLAIN = parse_speculative(None)


class ReferenceRuntime:
    """Lossless speculative decoding in PyTorch (float32; bfloat16 or float16 when asked) for every
    mode but EAGLE-1/2: one sequence at a time, or, after enable_batching(), concurrent calls
    batched in flight."""

    def __init__(
        self,
        *,
        target: CachedLM,
        tokenizer: Any,
        spec: Any,
        weights: Mapping[str, Any] | None = None,
    ):
        self.target = target
        self.tokenizer = tokenizer
        self.spec = spec
        # Each mode source's loaded weights (a draft CachedLM, heads), keyed by the recipe's
        # `models.<source>` name (toolkit.modes.SOURCES); the proposers read theirs.
        self.weights: dict[str, Any] = dict(weights or {})
        # Which tokens the target cache holds for verify_draft's prefix reuse; generate() invalidates it.
        self._verified: list[int] = []
        self._verify_gen: tuple[int | None, torch.Generator] | None = None
        self.batcher: Any = None  # toolkit.reference.batching.Batcher once enable_batching() ran
        self._held = threading.local()  # the batch membership a thread holds (hold())
        # The built speculative section whose draft_len_schedule / max_concurrency bound
        # verify_draft (a draft-target target loads without its draft, so self.spec is plain).
        self.verify_spec: Any = None
        self.inflate = 1  # the target's MLP padding (load(inflate=...)): the memory-bound twin
        self.lossy = False  # LOSSY_ENV: the test-only verifier that accepts every draft

    @property
    def twin_label(self) -> str | None:
        """'memory-bound twin: target padded ×N, F GB per step' when the target is padded, for
        every report of numbers measured on it; None for the plain target."""
        from toolkit.membound import label

        return label(self.inflate, step_bytes(self.target.model)) if self.inflate > 1 else None

    @property
    def dtype(self) -> str:
        """What the target computes in: float32, bfloat16 or float16."""
        return str(self.target.embed.weight.dtype).removeprefix("torch.")

    def _checker(self) -> Callable[[Proposal, torch.Tensor, SamplingParams, Any], Verdict]:
        """core.verify (this module's name for it: a test seam), or the test-only lossy verifier
        when LOSSY_ENV was set at load."""
        return accept_every_draft if self.lossy else verify

    def _check_tokens(self, prop: Proposal, logits: torch.Tensor, sp: SamplingParams, gen: Any) -> Verdict:
        return self._checker()(prop, logits, sp, gen)

    def enable_batching(self, max_batch_size: int, capacity: int, reuse_slots: int | None = None) -> None:
        """Serve concurrent calls (from threads) with in-flight batching: each call joins the
        batch at the next iteration, and all active sequences share one forward per iteration."""
        from toolkit.reference.batching import Batcher

        self.batcher = Batcher(
            self.target,
            max_batch_size=max_batch_size,
            capacity=capacity,
            draft=self.draft,
            reuse_slots=max_batch_size if reuse_slots is None else reuse_slots,
        )

    @contextmanager
    def hold(self, prefix: Sequence[int]) -> Iterator[None]:
        """Keep this thread's sequence in the batch (and its KV slot) across several verify_draft
        calls, e.g. one request's plain steps: leaving and re-joining per token would fragment
        the batch and, with more requests than slots, hand the slot to another sequence."""
        if self.batcher is None or getattr(self._held, "seq", None) is not None:
            yield
            return
        with self.batcher.join(prefix=list(prefix)) as seq:
            self._held.seq = seq
            try:
                yield
            finally:
                self._held.seq = None

    def draft_len_now(self, cfg: Any) -> int | None:
        """The draft length the batch allows now (None: no limit), with TensorRT-LLM's meaning:
        speculation is off when more than `max_concurrency` requests are in the batch
        (Drafter.should_use_spec_decode), and `draft_len_schedule` gives the draft length of the
        largest batch-size threshold ≤ the batch size (Drafter.get_draft_len_for_batch_size)."""
        n = self.batcher.active if self.batcher is not None else 1
        limit = getattr(cfg, "max_concurrency", None)
        if limit is not None and n > limit:
            return 0
        schedule = getattr(cfg, "draft_len_schedule", None)
        if schedule:
            fits = [k for k in schedule if k <= n]
            return schedule[max(fits)] if fits else 0
        return None

    # ------------------------------------------------------------------ loading

    @property
    def draft(self) -> CachedLM | None:
        """The second causal LM a two-model mode drafts with (the weights' CachedLM), if loaded."""
        return next((w for w in self.weights.values() if isinstance(w, CachedLM)), None)

    @classmethod
    def load(
        cls,
        target: Path,
        weights: Mapping[str, Path | None] | None = None,
        *,
        spec: Any = None,
        dtype: str = "float32",
        tokenizer: Path | None = None,
        inflate: int = 1,
        embedding_from: Path | None = None,
    ) -> ReferenceRuntime:
        """`weights`: the mode sources to load besides the target, keyed by the recipe's
        `models.<source>` name (toolkit.modes.SOURCES: a draft model, heads), each loaded by its
        mode's proposer; None values are left out. `dtype`: what the target, the draft and the
        heads compute in (DTYPES; `auto` is float32). `inflate` > 1 pads the target's MLP that many
        times (the memory-bound twin, toolkit.membound); drafts and heads load unchanged.
        `embedding_from`: the checkpoint whose embedding a `target` stored without its own takes
        (a draft-target draft served as its own model)."""
        spec = spec if spec is not None else PLAIN
        if dtype not in DTYPES:
            raise ModelError(
                f"the reference runtime computes in {', '.join(k for k in DTYPES if k != 'auto')}, not {dtype}",
                hint="set dtype: float32 (the default), bfloat16 or float16 for the reference backend",
            )
        dt = DTYPES[dtype]
        proposers.proposer(spec.mode)  # a mode the runtime does not run fails before any loading
        paths = {k: Path(v) for k, v in (weights or {}).items() if v is not None}
        loaders = {source: proposers.loader(source, spec.mode) for source in paths}
        need = modes.info(spec.mode).source
        if need is not None and need not in paths:
            raise ModelError(
                f"speculative mode {spec.mode} needs a {need} checkpoint",
                hint=f"pass weights={{{need!r}: <directory>}}",
            )
        if embedding_from is not None:
            target_model = draft_target.load_draft_lm(Path(target), Path(embedding_from), dt)
        else:
            target_model = load_causal_lm(Path(target), "target", dt)
        inflate_mlp(target_model, inflate)
        loaded = {s: loaders[s].load_weights(p, target_model, dt, spec) for s, p in paths.items()}
        # The target layers a head reads (an EAGLE-3 head's captured hidden states).
        capture: Sequence[int] = next((w.capture for w in loaded.values() if getattr(w, "capture", ())), ())
        runtime = cls(
            target=CachedLM(target_model, capture=capture),
            tokenizer=_load_tokenizer(Path(tokenizer) if tokenizer else Path(target)),
            spec=spec,
            weights=loaded,
        )
        runtime.inflate = max(1, inflate)
        if os.environ.get(LOSSY_ENV) == "1":
            runtime.lossy = True
            print(
                f"sdtk reference runtime: {LOSSY_ENV}=1, verification accepts every draft unchecked "
                "(a deliberately lossy deployment, for tests only)",
                file=sys.stderr,
            )
        return runtime

    @classmethod
    def from_engine_dir(cls, path: Path) -> ReferenceRuntime:
        """The runtime an engine directory's config.json `reference` section describes."""
        path = Path(path)
        cfg_path = path / "config.json" if path.is_dir() else path
        try:
            cfg = json.loads(cfg_path.read_text())
        except FileNotFoundError:
            raise ModelError(f"no engine config at {cfg_path}", hint="run `sdtk build` first") from None
        except (OSError, ValueError) as e:
            raise ModelError(f"cannot read {cfg_path}: {e}", hint="rebuild the engine directory") from None
        ref = cfg.get("reference")
        if not isinstance(ref, dict) or not ref.get("checkpoint"):
            raise ModelError(
                f"{cfg_path} has no `reference` section with a checkpoint",
                hint="this engine was built for another backend; rebuild with backend: reference",
            )

        def opt(key: str) -> Path | None:
            return Path(ref[key]) if ref.get(key) else None

        return cls.load(
            Path(ref["checkpoint"]),
            {source: opt(source) for source in modes.SOURCES},
            spec=parse_speculative(ref.get("speculative")),
            dtype=str(cfg.get("pretrained_config", {}).get("dtype", "float32")),
            tokenizer=opt("tokenizer"),
            inflate=int(ref.get("inflate") or 1),
        )

    # ------------------------------------------------------------------ properties

    @property
    def eos_token_id(self) -> int | None:
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if eos is None:
            eos = self.target.config.eos_token_id
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        return eos

    @property
    def max_context(self) -> int:
        limits = [self.target.config.max_position_embeddings]
        if self.draft is not None:
            limits.append(self.draft.config.max_position_embeddings)
        return int(min(limits))

    # ------------------------------------------------------------------ generation

    @torch.inference_mode()
    def generate(
        self,
        prompt_ids: Sequence[int],
        max_new_tokens: int,
        *,
        sampling: SamplingParams = SamplingParams(),
        spec: Any = None,
        end_id: int | None = None,
        on_tokens: Callable[[list[int]], None] | None = None,
        processors: Processors | None = None,
        trace: Trace | None = None,
    ) -> GenerationResult:
        """`spec`: the recipe `speculative` section to decode with (None: the runtime's own;
        PLAIN: no speculation). `processors`: the request's penalties, min_tokens and bad words,
        applied to every verification row with that row's own prefix (lossless in every mode);
        `trace`: filled with each committed token's log prob / raw logits."""
        req = Request(
            prompt=self._check(prompt_ids, max_new_tokens),
            max_new_tokens=max_new_tokens,
            sampling=sampling,
            spec=spec if spec is not None else self.spec,
            eos=self._end_id(end_id),
            on_tokens=on_tokens,
            processors=processors,
            trace=trace,
        )
        if self.batcher is None:
            self._verified = []
            self.target.reset()
            return self._generate(req, self.target, None)
        with self.batcher.join() as seq:
            return self._generate(req, seq.target, seq.draft)

    def _generate(self, req: Request, target: Any, draft: Any) -> GenerationResult:
        """One request on `target` (and the batch's `draft`): the mode's speculator, prefilled with
        the prompt, then a greedy loop of its own where one applies, else the general steps."""
        mode_cfg, sampling, prompt = req.spec, req.sampling, req.prompt
        speculator = self._speculator(mode_cfg, sampling, draft)
        adaptive = Adaptive(mode_cfg) if getattr(mode_cfg, "adaptive_draft_len", False) else None
        ctx = Context(
            tokens=list(prompt),
            target=target,
            sampling=sampling,
            gen=None if sampling.greedy else generator(sampling.seed),
        )
        pre = None
        if len(prompt) > 1:
            pre = target.forward(
                prompt[:-1],
                logits_from=len(prompt) - 1,
                hidden=speculator.needs_hidden,
                aux=speculator.needs_aux,
            )
        speculator.prefill(ctx, pre)
        stats = SpecStats()
        raw = req.processors is None or not req.processors.active
        # Greedy steps are verified in the loop (core.verify's rule) when nothing else reads the logits.
        greedy_raw = sampling.greedy and self._checker() is greedy_rule and raw and req.trace is None
        if greedy_raw and isinstance(target, CachedLM):  # plain decoding and n-gram's chains
            if type(speculator) is PlainSpeculator and self.draft_len_now(mode_cfg) is None:
                return plain_greedy(ctx.tokens[-1], req.max_new_tokens, req.eos, req.on_tokens, target, stats)
            if hasattr(speculator, "propose_chain") and self.batcher is None:
                cap = self.draft_len_now(mode_cfg)
                return chain_greedy(speculator, ctx.tokens, req, cap, adaptive, target, stats)
        return self._steps(req, speculator, ctx, adaptive, stats, greedy_raw)

    def _steps(
        self,
        req: Request,
        speculator: Speculator,
        ctx: Context,
        adaptive: Adaptive | None,
        stats: SpecStats,
        greedy_raw: bool,
    ) -> GenerationResult:
        """The general loop: propose, one target forward over the proposal, verify, commit."""
        max_new_tokens, sampling, mode_cfg, eos = req.max_new_tokens, req.sampling, req.spec, req.eos
        on_tokens, processors, trace = req.on_tokens, req.processors, req.trace
        target: Any = ctx.target  # a CachedLM, or a batch sequence's view of one
        prompt_len = (
            len(req.prompt) if processors is None or processors.prompt_len is None else processors.prompt_len
        )
        out: list[int] = []
        finish = "length"
        # A CachedLM runs a chain with no mask (as its forward does when given chain parents), and
        # an accepted chain prefix is a crop (as its keep does for rows 0..k).
        cached = isinstance(target, CachedLM)
        check = self._checker()
        raw = processors is None or not processors.active
        # Without a batcher the batch is this one sequence: its draft-length cap is fixed.
        batched = self.batcher is not None
        fixed_cap = None if batched else self.draft_len_now(mode_cfg)
        needs_hidden, needs_aux = speculator.needs_hidden, speculator.needs_aux
        propose, update = speculator.propose, speculator.update
        tokens = ctx.tokens
        while len(out) < max_new_tokens:
            remaining = max_new_tokens - len(out)
            budget = remaining - 1
            now = self.draft_len_now(mode_cfg) if batched else fixed_cap
            if now is not None and now < budget:
                budget = now
            if adaptive is not None and adaptive.draft_len < budget:
                budget = adaptive.draft_len
            prop = propose(ctx, budget)
            start = target.length
            ptoks = prop.tokens
            chain = cached and prop.is_chain
            if cached:
                fwd = target.run(
                    [tokens[-1], *ptoks],
                    None if chain else _step_tree(tuple(prop.parents)),
                    0,
                    needs_hidden,
                    needs_aux,
                    greedy_raw,
                )
            else:
                fwd = target.forward(
                    [tokens[-1], *ptoks],
                    parents=_step_parents(tuple(prop.parents)),
                    hidden=needs_hidden,
                    aux=needs_aux,
                )
            if greedy_raw and (fwd.argmax is not None or fwd.logits1 is not None):
                # core.verify's greedy rule on the rows' argmaxes: the forward's own, else those
                # of the output head's [1, q, vocab] (no row view to make).
                argmaxes = fwd.argmax if fwd.argmax is not None else argmax_list(fwd.logits1)[0]
                verdict = verify_greedy(prop, argmaxes)
                # A chain's accepted path is its first nodes: a slice, no gather.
                commit = ptoks[: len(verdict.path)] if chain else [ptoks[i] for i in verdict.path]
                commit.append(verdict.token)
                logits = None
            else:
                logits = fwd.logits
                assert logits is not None
                if not raw:
                    logits = _process(logits, prop, tokens, prompt_len, processors, sampling)
                verdict = check(prop, logits, sampling, ctx.gen)
                commit = [ptoks[i] for i in verdict.path]
                commit.append(verdict.token)
            path = verdict.path
            if trace is not None or not chain:
                rows = [0, *(i + 1 for i in path)]
                if trace is not None:
                    assert logits is not None  # greedy chains are verified inline only without a trace
                    trace.record(commit, logits, fwd.logits, rows, sampling)
                target.keep(start, rows)
            else:
                target.crop(start + len(commit))
            tokens.extend(commit)
            update(ctx, prop, fwd, verdict)
            take, ended = take_tokens(commit, remaining, eos)
            if ended:
                finish = "eos"
            if chain and prop.num_draft == len(ptoks):
                stats.record_chain(len(ptoks), len(take))
            else:
                stats.record(prop.per_depth(), len(take))
            if adaptive is not None and ptoks:
                adapt(adaptive, stats, len(ptoks), len(path))
            out.extend(take)
            if on_tokens is not None:
                on_tokens(take)
            if finish == "eos":
                break
        return GenerationResult(token_ids=out, stats=stats, finish_reason=finish)

    @torch.inference_mode()
    def verify_draft(
        self,
        input_ids: Sequence[int],
        draft_ids: Sequence[int],
        *,
        sampling: SamplingParams = SamplingParams(),
        end_id: int | None = None,
        processors: Processors | None = None,
        trace: Trace | None = None,
    ) -> VerifyResult:
        """TRT-LLM `draft_tokens_external`: verify externally drafted tokens after `input_ids`.

        The target cache is reused when `input_ids` extends the previously verified sequence.
        With temperature > 0 each position draws from the target and a draft token is accepted
        iff it equals the draw (lossless for any drafter; needs no draft logits).
        `processors` / `trace` as in generate(); min_tokens counts from `processors.prompt_len`
        (None: from `input_ids`).
        """
        ids = self._check(input_ids, 1, extra=len(draft_ids))
        drafts = [int(t) for t in draft_ids]
        self._check_ids(drafts, "draft_ids")
        cap = self.draft_len_now(self.verify_spec or self.spec)
        if cap is not None:
            drafts = drafts[:cap]  # load-aware: verify no more than the batch size allows
        extra = (processors, trace)
        if self.batcher is None:
            return self._verify(ids, drafts, sampling, end_id, self.target, self, *extra)
        held = getattr(self._held, "seq", None)
        if held is not None:
            return self._verify(ids, drafts, sampling, end_id, held.target, held.target, *extra)
        with self.batcher.join(prefix=ids) as seq:
            return self._verify(ids, drafts, sampling, end_id, seq.target, seq.target, *extra)

    def _verify(
        self,
        ids: list[int],
        drafts: list[int],
        sampling: SamplingParams,
        end_id: int | None,
        target: Any,
        held: Any,
        processors: Processors | None = None,
        trace: Trace | None = None,
    ) -> VerifyResult:
        """verify_draft on `target`, whose cache holds `held._verified` (that state's tokens)."""
        common = 0
        limit = min(len(held._verified), len(ids) - 1)
        while common < limit and held._verified[common] == ids[common]:
            common += 1
        same_request = bool(held._verified) and common == len(held._verified)
        target.crop(common)
        fwd = target.forward(ids[common:] + drafts, logits_from=len(ids) - 1 - common)
        assert fwd.logits is not None
        gen = self._verify_generator(sampling, same_request, held)
        prop = Proposal.chain(drafts)
        prompt_len = (
            len(ids) if processors is None or processors.prompt_len is None else processors.prompt_len
        )
        logits = _process(fwd.logits, prop, ids, prompt_len, processors, sampling)
        verdict = self._check_tokens(prop, logits, sampling, gen)
        n = len(verdict.path)
        if trace is not None:
            trace.record(drafts[:n] + [verdict.token], logits, fwd.logits, range(n + 1), sampling)
        target.crop(len(ids) + n)
        held._verified = ids + drafts[:n]
        new = drafts[:n] + [verdict.token]
        eos = self._end_id(end_id)
        if eos is not None and eos in new:
            new = new[: new.index(eos) + 1]
        return VerifyResult(new_tokens=new, accepted=len(new) - 1, drafted=len(drafts))

    # ------------------------------------------------------------------ helpers

    def _verify_generator(
        self, sampling: SamplingParams, same_request: bool, held: Any
    ) -> torch.Generator | None:
        if sampling.greedy:
            return None
        # One stream per request: continuing it keeps the draws independent across calls, and a
        # fresh one per new sequence makes a seeded request reproducible.
        if not same_request or held._verify_gen is None or held._verify_gen[0] != sampling.seed:
            held._verify_gen = (sampling.seed, generator(sampling.seed))
        return held._verify_gen[1]

    def _end_id(self, end_id: int | None) -> int | None:
        if end_id is None:
            return self.eos_token_id
        return None if end_id < 0 else end_id

    def _check_ids(self, ids: list[int], what: str) -> None:
        vocab = self.target.config.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise GenerationError(
                f"{what} contains token id {bad[0]} outside the vocabulary [0, {vocab})",
                hint="tokenize with the target's tokenizer",
            )

    def _check(self, prompt_ids: Sequence[int], max_new_tokens: int, extra: int = 0) -> list[int]:
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise GenerationError("the prompt is empty", hint="pass at least one token")
        if max_new_tokens <= 0:
            raise GenerationError(
                f"max_new_tokens must be positive, got {max_new_tokens}", hint="ask for at least 1 token"
            )
        self._check_ids(prompt, "the prompt")
        need = len(prompt) + max(max_new_tokens, extra)
        if need > self.max_context:
            raise GenerationError(
                f"prompt ({len(prompt)} tokens) + {max(max_new_tokens, extra)} new tokens = {need} exceeds "
                f"the model's context of {self.max_context} tokens",
                hint="shorten the prompt or ask for fewer tokens",
            )
        return prompt

    def _speculator(self, cfg: Any, sampling: SamplingParams, draft: Any = None) -> Speculator:
        """The speculator of the mode's own proposer (toolkit/reference/<mode>.py, chosen by the
        mode's name); an unknown mode is a CompatError, never another mode's speculator."""
        return proposers.speculator(cfg, self, sampling, draft)


@functools.lru_cache(maxsize=1024)
def _step_tree(parents: tuple[int, ...]) -> TreeShape | None:
    """The TreeShape of a step whose proposal has these parents (None: the step is a chain)."""
    step = _step_parents(parents)
    return None if is_chain(step) else tree_shape(step)


@functools.lru_cache(maxsize=1024)
def _step_parents(parents: tuple[int, ...]) -> tuple[int, ...]:
    """A step's parents: the root (the last committed token), then the proposal's nodes under it."""
    return (-1, *(p + 1 for p in parents))


def _process(
    logits: torch.Tensor,
    prop: Proposal,
    tokens: list[int],
    prompt_len: int,
    processors: Processors | None,
    sampling: SamplingParams,
) -> torch.Tensor:
    """The verification rows (0..num_draft) processed with each row's own prefix; the rows after
    them (lookahead's Jacobi branch) are not verified and stay raw."""
    if processors is None or not processors.active:
        return logits
    k = prop.num_draft + 1
    prefixes = tree_prefixes(prop.tokens, prop.parents, prop.num_draft, list(tokens))
    return torch.cat([processors.rows(logits[:k], prefixes, prompt_len, sampling), logits[k:].float()])


def _load_tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise ModelError(
            f"cannot load the tokenizer from {path}: {e}", hint="point at a directory with tokenizer files"
        ) from None
