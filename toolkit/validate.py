"""`sdtk validate`: prove that a served deployment works and is lossless.

Checks: server and model metadata; a smoke generation over HTTP generate and over gRPC
(streaming when the model is decoupled); the correctness gate (greedy speculative token ids equal
the baseline greedy ids of the same target, or part from them only at a near-tie of the target's
top choices, toolkit/gate.py and docs/correctness.md; `strict`: identical text); acceptance
statistics read back through `return_perf_metrics`; three malformed requests, each refused with a
4xx naming the input.

`survive_burst` is `sdtk deploy`'s last check after these: a short burst of concurrent, streamed,
cancelled and malformed requests (the traffic of toolkit.stress) that no Python stub may die of.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from toolkit import modes, stress
from toolkit.checks import FAILED, Check, Status
from toolkit.client import TritonClient
from toolkit.errors import SdtkError, ServerError
from toolkit.gate import TIE_MARGIN, Divergence, Scorer, judge
from toolkit.generate import _runtime, reference_dtype, run_generate
from toolkit.hub import chat, gguf
from toolkit.progress import Step, steps
from toolkit.recipe import Recipe

# Short code prompts: the tiny CPU models are trained on Python source, and a real model
# continues them sensibly too.
DEFAULT_PROMPTS = (
    "def fibonacci(n):",
    "import os\n\n\ndef read_lines(path):",
    "class Stack:\n    def __init__(self):",
)


@dataclass(frozen=True)
class ValidateOptions:
    """What `validate_deployment` sends and how strictly it judges: the prompts, the new tokens
    per prompt, a baseline deployment to compare against (None: the recipe's target in process,
    or the BLS with speculation off), and `strict` (the correctness gate requires identical text,
    no tie allowance)."""

    prompts: tuple[str, ...] | list[str] = DEFAULT_PROMPTS
    max_tokens: int = 32
    baseline_url: str | None = None
    strict: bool = False


class ValidationFailed(SdtkError):
    def __init__(self, report: ValidationReport):
        self.report = report
        failed = [c for c in report.checks if c.status is FAILED]
        super().__init__(
            "validation failed: " + "; ".join(f"{c.name}: {c.detail}" for c in failed),
            hint="`sdtk logs` shows the server log; `sdtk validate --json` the full report",
        )


@dataclass
class ValidationReport:
    model: str
    http_url: str
    grpc_url: str | None
    baseline: str
    checks: list[Check] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    acceptance: dict[str, Any] = field(default_factory=dict)
    # The gate's findings: every divergence (ties included), the rule and where log-probs came from.
    divergences: list[dict[str, Any]] = field(default_factory=list)
    gate: dict[str, Any] = field(default_factory=dict)
    # How the prompts were sent (toolkit.hub.chat) and, for a GGUF target, where its weights came from.
    chat_template: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def add(self, name: str, status: Status | str, detail: str, progress: Step | None = None) -> None:
        self.checks.append(Check(name, Status(status), detail))
        if progress:
            progress(f"validate {name}: {status} ({detail})")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["checks"] = [c.to_dict() for c in self.checks]
        d["ok"] = self.ok
        return d

    def raise_if_failed(self) -> None:
        if not self.ok:
            raise ValidationFailed(self)


_stderr = steps("validate")


def _first_difference(a: str, b: str) -> str:
    i = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return f"first difference at character {i}: served {a[i : i + 30]!r} vs baseline {b[i : i + 30]!r}"


def _server_check(base: str) -> tuple[str, str]:
    import httpx

    try:
        with httpx.Client(base_url=base, timeout=5) as h:
            live = h.get("/v2/health/live").status_code == 200
            ready = h.get("/v2/health/ready").status_code == 200
            meta = h.get("/v2").json()
    except (httpx.HTTPError, ValueError) as e:
        return "failed", f"server metadata unavailable: {e}"
    if not (live and ready):
        return "failed", f"live={live} ready={ready}"
    return "passed", f"live and ready; {meta.get('name', 'triton')} {meta.get('version', '?')}"


INT32_MAX = 2**31 - 1


def bad_requests(entry_kind: str, prompt: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Three malformed /generate bodies: (what, the input the refusal must name, body)."""
    key = "sampling_param_max_tokens" if entry_kind == "llmapi" else "max_tokens"
    return [
        ("text_input missing", "text_input", {key: 4}),
        (f"{key} 0", key, {"text_input": prompt, key: 0}),
        (f"{key} beyond int32", key, {"text_input": prompt, key: INT32_MAX + 1}),
    ]


def _bad_input_check(base: str, model: str, entry_kind: str, prompt: str) -> tuple[str, str]:
    """Each malformed request must get a 4xx whose error names the input. Accepting one fails the
    check; a refusal that is a 5xx, or names no input, only warns: NVIDIA's own models (the
    TensorRT-LLM C++ backend, the LLM-API model.py) refuse some of these as internal errors."""
    import httpx

    failed, unclear, seen = [], [], []
    with httpx.Client(base_url=base, timeout=60) as h:
        for what, name, body in bad_requests(entry_kind, prompt):
            try:
                r = h.post(f"/v2/models/{model}/generate", json=body)
            except httpx.HTTPError as e:
                failed.append(f"{what}: {e.__class__.__name__}: {e}")
                continue
            try:
                error = str(r.json().get("error", ""))
            except ValueError:
                error = ""
            if r.status_code < 400 or not error:
                failed.append(f"{what}: accepted (HTTP {r.status_code}: {r.text[:120]!r})")
            elif r.status_code >= 500 or name not in error:
                unclear.append(
                    f"{what}: HTTP {r.status_code}, expected a 4xx naming {name} ({error[:120]!r})"
                )
            else:
                seen.append(f"{what} → {r.status_code}")
    if failed or unclear:
        return ("failed" if failed else "warning"), "; ".join(failed + unclear)
    return "passed", "malformed requests refused: " + ", ".join(seen)


def _baseline_fn(
    recipe: Recipe | None, entry_kind: str, baseline_url: str | None, model: str, max_tokens: int, http: Any
) -> tuple[str, Callable[[str], str] | None]:
    """How to get the baseline greedy text for a prompt, and a description of it.

    `http` is the open client of the validated model (the BLS baseline goes through it).
    """
    if baseline_url:

        def remote(prompt: str) -> str:
            with TritonClient(baseline_url, protocol="http", model=model) as c:
                return c.generate(prompt, max_tokens, exclude_input_in_output=True).text

        return f"baseline deployment {baseline_url}", remote
    if (
        recipe is not None
        and recipe.backend in ("reference", "auto")
        and recipe.local_path(recipe.models.target)
    ):

        def local(prompt: str) -> str:
            return run_generate(recipe, prompt, max_tokens, no_speculation=True)["text"]

        dtype = reference_dtype(recipe)
        return "in-process reference runtime, speculation off" + (
            f" ({dtype})" if dtype != "float32" else ""
        ), local
    if entry_kind == "bls":

        def bls_off(prompt: str) -> str:
            return http.generate(prompt, max_tokens, exclude_input_in_output=True, num_draft_tokens=0).text

        return "the same BLS with num_draft_tokens=0", bls_off
    return "none available (pass --baseline-url)", None


def validate_deployment(
    *,
    http_url: str,
    grpc_url: str | None,
    model: str,
    recipe: Recipe | None = None,
    options: ValidateOptions = ValidateOptions(),
    progress: Step | None = _stderr,
) -> ValidationReport:
    """Validate the deployment at `http_url` as `options` says (ValidateOptions). The prompts go
    through the recipe's chat template when it applies one (serving.chat_template), as a chat
    client's would; the baseline and the gate see the same rendered text."""
    max_tokens, baseline_url, strict = options.max_tokens, options.baseline_url, options.strict
    fmt = chat.for_recipe(recipe)
    prompts = fmt.render_all(options.prompts)
    with TritonClient(http_url, protocol="http", model=model) as http:
        info = http.model_info()
        entry_kind = "bls" if "num_draft_tokens" in info.inputs else "ensemble"
        desc, baseline = _baseline_fn(recipe, entry_kind, baseline_url, model, max_tokens, http)
        report = ValidationReport(model=model, http_url=http_url, grpc_url=grpc_url, baseline=desc)
        report.chat_template = fmt.to_dict()
        report.notes = [fmt.label] + [n for n in (gguf.weights_note(recipe),) if n]
        for note in report.notes:
            if progress:
                progress(f"validate: {note}")
        report.add("server", *_server_check(http.url), progress)
        report.add(
            "model",
            "passed",
            f"'{model}' ready; decoupled={info.decoupled}; max_batch_size={info.max_batch_size}; "
            f"{len(info.inputs)} inputs",
            progress,
        )
        params: dict[str, Any] = {"exclude_input_in_output": True}
        # the LLM-API model names it sampling_param_return_perf_metrics (toolkit/client/llmapi.py)
        if {"return_perf_metrics", "sampling_param_return_perf_metrics"} & set(info.inputs):
            params["return_perf_metrics"] = True
        if entry_kind == "bls" and recipe is not None and modes.info(recipe.mode).two_model:
            params["num_draft_tokens"] = recipe.speculative.draft_len

        served: list[Any] = []
        try:
            for prompt in prompts:
                served.append(http.generate(prompt, max_tokens, **params))
            report.add("http-generate", "passed", f"{len(served)} generations over /generate", progress)
        except SdtkError as e:
            report.add("http-generate", "failed", str(e), progress)
            return report
        if info.decoupled:
            try:
                s = http.stream(prompts[0], max_tokens, **params)
                chunks = sum(1 for _ in s)
                same = s.response.text == served[0].text
                report.add(
                    "http-stream",
                    "passed" if same else "failed",
                    f"{chunks} chunks over /generate_stream"
                    + ("" if same else "; text differs from /generate"),
                    progress,
                )
            except SdtkError as e:
                report.add("http-stream", "failed", str(e), progress)

        if grpc_url:
            try:
                with TritonClient(grpc_url, protocol="grpc", model=model) as g:
                    if info.decoupled:
                        s = g.stream(prompts[0], max_tokens, **params)
                        chunks = sum(1 for _ in s)
                        text, how = s.response.text, f"streaming, {chunks} chunks"
                    else:
                        text, how = g.generate(prompts[0], max_tokens, **params).text, "infer"
                same = text == served[0].text
                report.add(
                    "grpc",
                    "passed" if same else "failed",
                    how + ("" if same else "; text differs from HTTP"),
                    progress,
                )
            except SdtkError as e:
                report.add("grpc", "failed", str(e), progress)

        if baseline is None:
            report.add("correctness", "skipped", f"baseline: {desc}", progress)
        else:
            texts = [(p, r.text, baseline(p)) for p, r in zip(prompts, served, strict=True)]
            for prompt, got, want in texts:
                report.samples.append({"prompt": prompt, "served": got, "baseline": want})
            gate = _GateSetup.make(recipe, http.url, baseline_url, model, strict)
            report.add("correctness", *_correctness(report, texts, gate, desc), progress)

        _acceptance(report, served, recipe, progress)
        report.add("bad-input", *_bad_input_check(http.url, model, entry_kind_of(info), prompts[0]), progress)
    return report


@dataclass
class _GateSetup:
    """What the gate needs: the tokenizer (None: compare text), the margin source and threshold."""

    tokenizer: Any
    scorer: Scorer | None
    source: str
    dtype: str
    strict: bool
    add_special_tokens: bool = True

    @property
    def threshold(self) -> float:
        return TIE_MARGIN[self.dtype]

    @classmethod
    def make(
        cls, recipe: Recipe | None, http_url: str, baseline_url: str | None, model: str, strict: bool
    ) -> _GateSetup:
        dtype = serving_dtype(recipe)
        add = recipe.serving.add_special_tokens if recipe is not None else True
        if strict:
            return cls(None, None, "strict: identical text", dtype, True, add)
        tokenizer = _tokenizer(recipe, baseline_url or http_url)
        if tokenizer is None:
            return cls(None, None, "no tokenizer at hand: identical text", dtype, True, add)
        if (
            recipe is not None
            and recipe.backend in ("reference", "auto")
            and recipe.local_path(recipe.models.target)
        ):
            return cls(tokenizer, _local_scorer(recipe), "the target in process (float32)", dtype, False, add)
        if baseline_url:
            scorer = _served_scorer(baseline_url, model, tokenizer, add)
            return cls(
                tokenizer,
                scorer,
                f"generation_logits of the baseline deployment {baseline_url}",
                dtype,
                False,
                add,
            )
        return cls(tokenizer, None, "no log-probs (pass --baseline-url or --recipe)", dtype, False, add)


def serving_dtype(recipe: Recipe | None) -> str:
    """The dtype the deployment computes in: the reference runtime's (the recipe's dtype, float32
    for `auto`), else the recipe's (`auto`: the checkpoint's torch_dtype when it is at hand, else
    bfloat16)."""
    if recipe is None:
        return "bfloat16"
    if recipe.backend == "reference":
        return reference_dtype(recipe)
    if recipe.dtype != "auto":
        return recipe.dtype
    import json

    local = recipe.local_path(recipe.models.target)
    try:
        cfg = json.loads((local / "config.json").read_text()) if local else {}
    except (OSError, ValueError):
        cfg = {}
    torch_dtype = cfg.get("torch_dtype") or cfg.get("dtype")  # newer transformers write `dtype`
    return torch_dtype if torch_dtype in TIE_MARGIN else "bfloat16"


def _tokenizer(recipe: Recipe | None, http_url: str) -> Any:
    """The target's tokenizer: the recipe's when local, else the deployment's preprocessing
    tokenizer_dir (readable on this machine), else None."""
    from transformers import AutoTokenizer

    candidates = []
    if recipe is not None:
        for source in (recipe.models.tokenizer, recipe.models.target):
            if source is not None and recipe.local_path(source):
                candidates.append(recipe.local_path(source))
    try:
        import httpx

        params = (
            httpx.get(f"{http_url}/v2/models/preprocessing/config", timeout=10).json().get("parameters", {})
        )
        candidates.append(params.get("tokenizer_dir", {}).get("string_value"))
    except (OSError, ValueError, AttributeError, httpx.HTTPError):
        pass
    for path in candidates:
        if path:
            try:
                return AutoTokenizer.from_pretrained(str(path))
            except (OSError, ValueError):
                continue
    return None


def _local_scorer(recipe: Recipe) -> Scorer:
    """The target in process (the reference runtime in float32, whatever the deployment computes
    in): log-softmax at the next position."""

    def score(ids: list[int]) -> list[float]:
        import torch

        model = _runtime(recipe, "float32").target.model
        with torch.inference_mode():
            logits = model(torch.tensor([ids])).logits[0, -1].float()
        return torch.log_softmax(logits, -1).tolist()

    return score


def _served_scorer(url: str, model: str, tokenizer: Any, add_special_tokens: bool) -> Scorer:
    """The baseline deployment's generation_logits for one token after the text of `ids` (None
    when that text does not tokenize back to `ids`, or the deployment returns no logits).
    output_log_probs carries only the chosen token's log-prob (0 for greedy under upstream's
    normalize_log_probs), so the gate asks for the logits of that one position."""

    def score(ids: list[int]) -> list[float] | None:
        import math

        import httpx

        # `ids` = the prompt's ids (special tokens included) + the common generated prefix.
        text = tokenizer.decode(ids, skip_special_tokens=True)
        if tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"] != ids:
            return None
        body = {"text_input": text, "max_tokens": 1, "return_generation_logits": True}
        try:
            r = httpx.post(f"{url}/v2/models/{model}/generate", json=body, timeout=120)
            logits = r.json().get("generation_logits") if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        flat = _flatten(logits)
        if not flat:
            return None
        top = max(flat)
        norm = top + math.log(sum(math.exp(x - top) for x in flat))
        return [x - norm for x in flat]

    return score


def _flatten(value: Any) -> list[float]:
    if isinstance(value, list):
        return [x for v in value for x in _flatten(v)]
    return [] if value is None else [float(value)]


def _correctness(
    report: ValidationReport, texts: list[tuple[str, str, str]], gate: _GateSetup, desc: str
) -> tuple[str, str]:
    """The correctness check's status and detail (docs/correctness.md)."""
    report.gate = {
        "rule": "strict" if gate.strict else "ids, ties allowed",
        "dtype": gate.dtype,
        "tie_threshold": None if gate.strict else gate.threshold,
        "log_probs": gate.source,
    }
    if gate.strict:
        mismatches = [f"prompt {p!r}: {_first_difference(g, w)}" for p, g, w in texts if g != w]
        if mismatches:
            return "failed", f"speculative output differs from the baseline ({gate.source}): " + " | ".join(
                mismatches
            )
        return "passed", f"{len(texts)} prompts identical to the baseline ({desc}; {gate.source})"
    tok = gate.tokenizer
    ties: list[Divergence] = []
    failures: list[Divergence] = []
    for prompt, got, want in texts:
        prompt_ids = tok(prompt, add_special_tokens=gate.add_special_tokens)["input_ids"]
        served_ids = tok(got, add_special_tokens=False)["input_ids"]
        baseline_ids = tok(want, add_special_tokens=False)["input_ids"]
        d = judge(prompt, prompt_ids, served_ids, baseline_ids, gate.scorer, gate.threshold, gate.source)
        if d is None:
            continue
        report.divergences.append(d.to_dict())
        (ties if d.tie else failures).append(d)
    same = len(texts) - len(ties) - len(failures)
    summary = (
        f"{same} of {len(texts)} prompts identical to the baseline, {len(ties)} diverged at a tie "
        f"(|margin| ≤ {gate.threshold:g}, {gate.dtype}; log-probs: {gate.source}; baseline: {desc})"
    )
    if failures:
        return "failed", "not a tie: " + " | ".join(d.describe(tok.decode) for d in failures) + f"; {summary}"
    return "passed", summary + "".join(f"; tie: {d.describe(tok.decode)}" for d in ties)


def entry_kind_of(info: Any) -> str:
    """bls, ensemble or llmapi, from the entry model's inputs."""
    if "num_draft_tokens" in info.inputs:
        return "bls"
    return "llmapi" if "sampling_param_max_tokens" in info.inputs else "ensemble"


def _acceptance(report: ValidationReport, served: list[Any], recipe: Recipe | None, progress: Any) -> None:
    drafted = [r.total_draft_tokens for r in served if r.total_draft_tokens is not None]
    accepted = [r.total_accepted_draft_tokens for r in served if r.total_accepted_draft_tokens is not None]
    mode = recipe.mode if recipe is not None else None
    if not drafted:
        status = "skipped" if mode in (None, "none") else "failed"
        report.add(
            "acceptance", status, "the model returned no acceptance outputs (return_perf_metrics)", progress
        )
        return
    total_d, total_a = sum(drafted), sum(accepted)
    rate = total_a / total_d if total_d else 0.0
    report.acceptance = {
        "draft_tokens": total_d,
        "accepted_tokens": total_a,
        "acceptance_rate": round(rate, 4),
    }
    if mode in (None, "none"):
        report.add("acceptance", "passed", f"{total_d} draft tokens (baseline)", progress)
    elif total_d == 0:
        report.add("acceptance", "warning", "no draft tokens proposed: speculation looks inactive", progress)
    elif total_a == 0:
        report.add(
            "acceptance",
            "warning",
            f"0 of {total_d} draft tokens accepted: check that draft and target share a tokenizer",
            progress,
        )
    else:
        report.add(
            "acceptance", "passed", f"{total_a}/{total_d} draft tokens accepted ({rate:.1%})", progress
        )


def survive_burst(
    server: Any,
    *,
    decoupled: bool,
    llmapi: bool = False,
    n: int = 12,
    concurrency: int = 4,
    output_room: int = stress.CANCEL_TOKENS,
) -> str:
    """`sdtk deploy`'s last check: a short burst of concurrent, streamed, cancelled and malformed
    requests after validation. Raises ServerError if a stub died or a well-formed request failed.
    `output_room`: the most tokens any prompt may still generate (build.max_seq_len less
    build.max_input_len); a cancelled stream asks for up to stress.CANCEL_TOKENS of it."""
    kinds = stress.KINDS if decoupled else ("http", "bad")
    traffic = stress.Traffic(server.http_url, server.grpc_url, server.model_name, llmapi=llmapi)
    requests = stress.plan(n, kinds=kinds, cancel_tokens=min(stress.CANCEL_TOKENS, output_room))
    report = stress.run(traffic, requests, concurrency=concurrency, pgid=server.pid)
    if report.stub_deaths or report.failures:
        first = report.failures[0] if report.failures else None
        raise ServerError(
            f"the deployment did not survive a burst of {n} concurrent requests: "
            f"{report.stub_deaths} Python stub(s) died, {len(report.failures)} request(s) failed"
            + (f" (first: {first.kind}: {first.error})" if first else ""),
            log_path=server.log_path,
            hint="see the server log (sdtk logs)",
        )
    return f"burst: {n} concurrent requests ({', '.join(kinds)}) answered; no Python stub died"
