"""Validation of an OpenAI-compatible deployment (Dynamo's frontend): `sdtk validate` and the
check `sdtk deploy --target dynamo` runs at READY.

Checks: the model is listed (`/v1/models`); greedy `/v1/completions`, plain and streamed (the
same text); `/v1/chat/completions`, plain and streamed (one user message through the chat
template); the correctness gate on the completions (toolkit.validate's gate: greedy speculative
ids equal the baseline's, or part from them at a near-tie only; docs/correctness.md); a bad
request answered 4xx.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolkit.client.openai_api import OpenAIClient
from toolkit.errors import SdtkError
from toolkit.progress import Step
from toolkit.recipe import Recipe
from toolkit.validate import DEFAULT_PROMPTS, ValidationReport, _correctness, _GateSetup


def _baseline(recipe: Recipe | None, max_tokens: int) -> tuple[str, Callable[[str], str] | None]:
    if (
        recipe is not None
        and recipe.backend in ("reference", "auto")
        and recipe.local_path(recipe.models.target)
    ):
        from toolkit.generate import run_generate

        def local(prompt: str) -> str:
            return str(run_generate(recipe, prompt, max_tokens, no_speculation=True)["text"])

        return "in-process reference runtime, speculation off", local
    return "none available (pass --recipe with a local target)", None


def _bad_request(c: OpenAIClient, prompt: str) -> tuple[str, str]:
    """max_tokens -1 must be refused with a 4xx."""
    r = c.post("/v1/completions", {"model": c.model, "prompt": prompt, "max_tokens": -1})
    if 400 <= r.status_code < 500:
        return "passed", f"max_tokens -1 → HTTP {r.status_code}"
    return "failed", f"max_tokens -1 answered HTTP {r.status_code}: {r.text[:160]!r}"


def validate_openai(
    *,
    http_url: str,
    model: str,
    recipe: Recipe | None = None,
    prompts: tuple[str, ...] | list[str] = DEFAULT_PROMPTS,
    max_tokens: int = 32,
    progress: Step | None = None,
    strict: bool = False,
) -> ValidationReport:
    desc, baseline = _baseline(recipe, max_tokens)
    report = ValidationReport(model=model, http_url=http_url, grpc_url=None, baseline=desc)
    with OpenAIClient(http_url, model) as c:
        try:
            listed = c.models()
        except SdtkError as e:
            report.add("server", "failed", str(e), progress)
            return report
        if model not in listed:
            report.add("server", "failed", f"/v1/models lists {listed}, not '{model}'", progress)
            return report
        report.add("server", "passed", f"/v1/models lists '{model}'", progress)
        served: list[Any] = []
        try:
            served = [c.complete(p, max_tokens) for p in prompts]
            report.add("completions", "passed", f"{len(served)} greedy /v1/completions", progress)
            s = c.complete(prompts[0], max_tokens, stream=True)
            same = s.text == served[0].text
            report.add(
                "completions-stream",
                "passed" if same else "failed",
                f"{s.chunks} chunks" + ("" if same else f"; text differs: {s.text!r} vs {served[0].text!r}"),
                progress,
            )
            chat = c.chat(prompts[0], max_tokens)
            chat_s = c.chat(prompts[0], max_tokens, stream=True)
            ok = bool(chat.text) and chat_s.text == chat.text
            report.add(
                "chat",
                "passed" if ok else "failed",
                f"/v1/chat/completions {len(chat.text)} characters, streamed in {chat_s.chunks} chunks"
                + ("" if ok else f"; streamed {chat_s.text!r} vs {chat.text!r}"),
                progress,
            )
        except SdtkError as e:
            report.add("completions" if not served else "chat", "failed", str(e), progress)
            return report
        if baseline is None:
            report.add("correctness", "skipped", f"baseline: {desc}", progress)
        else:
            texts = [(p, r.text, baseline(p)) for p, r in zip(prompts, served, strict=True)]
            for prompt, got, want in texts:
                report.samples.append({"prompt": prompt, "served": got, "baseline": want})
            gate = _GateSetup.make(recipe, http_url, None, model, strict)
            report.add("correctness", *_correctness(report, texts, gate, desc), progress)
        report.add("bad-input", *_bad_request(c, prompts[0]), progress)
    return report
