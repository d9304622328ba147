"""`sdtk doctor --url URL`: is a deployed Triton serving, and is speculation actually on?

Checks, in order (each a toolkit.checks.Check: passed / warning / failed / skipped):

1. live      GET /v2/health/live. Nothing answering is an error (ServerUnreachable), not a report:
             no other check can run.
2. ready     GET /v2/health/ready.
3. models    POST /v2/repository/index: the model is listed and READY; lists models that are not.
4. model     GET /v2/models/<model>/ready.
5. metrics   GET the metrics endpoint: reachable and Triton's (nv_inference_request_success); says
             whether TensorRT-LLM (nv_trt_llm_*) and sdtk (sdtk_spec_*) families are there.
6. speculation  one greedy probe with return_perf_metrics through toolkit.client: speculation is
             active when total_accepted_draft_tokens > 0, i.e. acceptance length > 1.

The verdict is one line. `ok` is False when any check failed; a deployment that serves but does not
speculate is a failure only with `expect_speculation=True` (the default), so that baseline recipes
can be checked with `expect_speculation=False`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from toolkit.checks import FAILED, PASSED, SKIPPED, WARNING, Check, Status
from toolkit.errors import ServerError, UsageError

OK, WARN, FAIL, SKIP = PASSED, WARNING, FAILED, SKIPPED
DEFAULT_METRICS_PORT = 8002
PROBE_PROMPT = "Summarize the plot of Romeo and Juliet in two sentences."


def _check(name: str, status: Status, value: str, detail: str = "", hint: str | None = None) -> Check:
    """A deployment check (status passed | warning | failed | skipped) with its short reading."""
    return Check(name, status, detail, hint, value)


@dataclass(frozen=True)
class SpeculationProbe:
    """The request `check_deployment` sends to see speculation at work: `prompt`, `max_tokens`,
    the draft tokens per step to ask for (`num_draft_tokens`; None: the deployment's), the
    deployment's draft length when known (`draft_len`, for the acceptance length), whether
    speculation is expected (`expect`: False for a baseline deployment), and its `timeout`."""

    prompt: str = PROBE_PROMPT
    max_tokens: int = 32
    num_draft_tokens: int | None = 4
    draft_len: int | None = None
    expect: bool = True
    timeout: float = 120.0


@dataclass
class HealthReport:
    url: str
    model: str
    metrics_url: str
    checks: list[Check] = field(default_factory=list)
    speculation: dict[str, Any] | None = None
    verdict: str = ""

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def check(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict:
        return {
            "url": self.url,
            "model": self.model,
            "metrics_url": self.metrics_url,
            "ok": self.ok,
            "verdict": self.verdict,
            "speculation": self.speculation,
            "checks": [c.to_dict() for c in self.checks],
        }


def _base_url(url: str) -> str:
    if not url or not url.strip():
        raise UsageError("--url is empty", hint="e.g. --url http://localhost:8000")
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"'{url}' is not an http(s) URL of a Triton HTTP endpoint",
            hint="e.g. --url http://localhost:8000",
        )
    try:
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:
        raise UsageError(f"'{url}' has an invalid port") from None
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def default_metrics_url(url: str, port: int = DEFAULT_METRICS_PORT) -> str:
    """Same host as the HTTP endpoint, Triton's metrics port (8002 unless told otherwise)."""
    parts = urlsplit(_base_url(url))
    host = parts.hostname or "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}:{port}/metrics"


def _get(client: Any, path: str) -> Any:
    return client.get(path)


def check_deployment(
    url: str,
    model: str = "ensemble",
    *,
    metrics_url: str | None = None,
    timeout: float = 5.0,
    probe: SpeculationProbe | None = SpeculationProbe(),
    client: Any = None,
) -> HealthReport:
    """Check a deployment at `url` (its HTTP endpoint) serving `model`; see the module docstring.
    `probe`: the speculation probe's request (None: no probe).

    Raises UsageError for a malformed URL and ServerError (ServerUnreachable) when nothing answers.
    """
    import httpx

    from toolkit.client import common
    from toolkit.client.errors import STATUS_HINT, ServerUnreachable

    base = _base_url(url)
    murl = metrics_url or default_metrics_url(base)
    report = HealthReport(base, model, murl)
    add = report.checks.append
    http = httpx.Client(base_url=base, timeout=httpx.Timeout(timeout))
    try:
        # 1. live: the only check whose failure is an exception.
        try:
            with common.http_errors(base, model, timeout):
                r = http.get("/v2/health/live")
        except ServerUnreachable as e:
            raise ServerUnreachable(
                f"no Triton server answers at {base}: {e.message.split(': ', 1)[-1]}",
                url=base,
                model=model,
                protocol="http",
                hint="check the URL and port (the HTTP port, 8000 by default); in Kubernetes: "
                "kubectl port-forward svc/<name> 8000:8000; otherwise " + STATUS_HINT,
            ) from None
        except ServerError as e:
            raise ServerError(
                f"{base} does not answer like a Triton server: {e.message}", hint=e.hint
            ) from None
        if r.status_code == 404:
            raise ServerError(
                f"{base}/v2/health/live returned 404: not a Triton HTTP endpoint",
                hint="point --url at Triton's HTTP port (not gRPC or metrics)",
            )
        add(_check("live", OK if r.status_code == 200 else FAIL, f"HTTP {r.status_code}"))

        # 2. ready
        r = _safe(http, "GET", "/v2/health/ready")
        if r is None:
            add(_check("ready", FAIL, "no answer", "GET /v2/health/ready failed"))
        else:
            add(
                _check(
                    "ready",
                    OK if r.status_code == 200 else FAIL,
                    f"HTTP {r.status_code}",
                    "" if r.status_code == 200 else "some model failed to load or is still loading",
                    None if r.status_code == 200 else "see the server log (sdtk logs / kubectl logs)",
                )
            )

        # 3. models in the repository
        add(_check_index(http, model))

        # 4. the model itself
        r = _safe(http, "GET", f"/v2/models/{model}/ready")
        model_ready = r is not None and r.status_code == 200
        add(
            _check(
                "model",
                OK if model_ready else FAIL,
                "ready" if model_ready else (f"HTTP {r.status_code}" if r is not None else "no answer"),
                f"/v2/models/{model}/ready",
                None if model_ready else "check the model name (serving.model_name) and the server log",
            )
        )
    finally:
        http.close()

    # 5. metrics
    add(_check_metrics(murl, timeout))

    # 6. speculation
    if probe is None:
        add(_check("speculation", SKIP, "not probed", "probe disabled"))
    elif not model_ready:
        add(_check("speculation", SKIP, "not probed", f"model '{model}' is not ready"))
    else:
        check, spec = _check_speculation(base, model, client, probe)
        add(check)
        report.speculation = spec
    report.verdict = _verdict(report)
    return report


def _safe(http: Any, method: str, path: str, **kw: Any) -> Any:
    try:
        return http.request(method, path, **kw)
    except Exception:  # noqa: BLE001 - reported as "no answer"
        return None


def _check_index(http: Any, model: str) -> Check:
    r = _safe(http, "POST", "/v2/repository/index", json={})
    if r is not None and r.status_code == 403:
        # `sdtk deploy` restricts the model-repository API to its key (`sdtk restart`): ask the
        # model itself.
        ready = _safe(http, "GET", f"/v2/models/{model}/ready")
        if ready is not None and ready.status_code == 200:
            return _check("models", OK, f"'{model}' ready", "the repository index is restricted to its key")
        code = "no answer" if ready is None else f"HTTP {ready.status_code}"
        return _check("models", FAIL, f"'{model}' not ready ({code})", "the repository index is restricted")
    if r is None or r.status_code != 200:
        code = "no answer" if r is None else f"HTTP {r.status_code}"
        return _check("models", WARN, code, "the repository index is not available")
    try:
        entries = r.json()
    except ValueError:
        return _check("models", WARN, "unreadable", "the repository index is not JSON")
    states = {}
    for e in entries:
        name = e.get("name")
        if name and (name not in states or e.get("state") == "READY"):
            states[name] = (e.get("state") or "UNKNOWN", e.get("reason") or "")
    not_ready = {n: s for n, s in states.items() if s[0] != "READY"}
    listing = ", ".join(f"{n} ({s[0]})" for n, s in sorted(states.items()))
    if model not in states:
        from toolkit.errors import did_you_mean

        guess = did_you_mean(model, states)
        return _check(
            "models",
            FAIL,
            f"{len(states)} model(s), '{model}' not among them",
            listing,
            (f"did you mean '{guess}'? " if guess else "") + "pass --model (serving.model_name)",
        )
    if not_ready:
        why = "; ".join(f"{n}: {s[0]} {s[1]}".strip() for n, s in sorted(not_ready.items()))
        return _check(
            "models", FAIL, f"{len(not_ready)} of {len(states)} not ready", why, "see the server log"
        )
    return _check("models", OK, f"{len(states)} ready", listing)


def _check_metrics(murl: str, timeout: float) -> Check:
    import httpx

    try:
        r = httpx.get(murl, timeout=timeout)
    except httpx.HTTPError as e:
        return _check(
            "metrics",
            FAIL,
            "unreachable",
            f"{murl}: {e.__class__.__name__}",
            "pass --metrics-url (Triton's --metrics-port, 8002 by default); is --allow-metrics off?",
        )
    if r.status_code != 200:
        return _check("metrics", FAIL, f"HTTP {r.status_code}", murl)
    text = r.text
    if "nv_inference_request_success" not in text and "nv_" not in text:
        return _check("metrics", WARN, "no Triton metrics", f"{murl} answers but has no nv_* series")
    extra = []
    if "nv_trt_llm_" in text:
        extra.append("TensorRT-LLM nv_trt_llm_*")
    if "sdtk_spec_" in text:
        extra.append("sdtk_spec_*")
    if "nv_gpu_utilization" in text:
        extra.append("GPU")
    return _check("metrics", OK, "reachable", murl + (" (+ " + ", ".join(extra) + ")" if extra else ""))


def _check_speculation(
    base: str, model: str, client: Any, probe: SpeculationProbe
) -> tuple[Check, dict[str, Any] | None]:
    timeout, prompt, max_tokens = probe.timeout, probe.prompt, probe.max_tokens
    num_draft_tokens, draft_len, expect = probe.num_draft_tokens, probe.draft_len, probe.expect
    from toolkit.ops import spec_metrics as sm
    from toolkit.ops.monitor import probe_request_params

    own = client is None
    if own:
        from toolkit.client import TritonClient

        client = TritonClient(base, model=model, timeout=timeout)
    try:
        info = client.model_info()
        params = probe_request_params(info.inputs, num_draft_tokens)
        if "return_perf_metrics" not in params:
            return (
                _check(
                    "speculation",
                    WARN if not expect else FAIL,
                    "unknown",
                    f"model '{model}' has no return_perf_metrics input, so acceptance cannot be read",
                    "probe the ensemble or tensorrt_llm_bls model (--model)",
                ),
                None,
            )
        resp = client.generate(prompt, max_tokens, **params)
    except Exception as e:  # noqa: BLE001 - the probe's failure is the finding
        return (
            _check(
                "speculation",
                FAIL,
                "probe failed",
                str(e),
                getattr(e, "hint", None) or "try the request by hand: sdtk generate",
            ),
            None,
        )
    finally:
        if own:
            client.close()
    obs = sm.Observation.of(
        resp.acceptance_rate,
        resp.total_accepted_draft_tokens,
        resp.total_draft_tokens,
        resp.output_tokens,
        None,
        draft_len,
    )
    spec = {
        "acceptance_rate": obs.rate,
        "accepted": obs.accepted,
        "drafted": obs.drafted,
        "output_tokens": obs.output_tokens,
        "acceptance_length": obs.length,
        "latency_s": round(resp.latency_s, 4),
    }
    bad = FAIL if expect else WARN
    if obs.drafted is None and obs.accepted is None:
        return (
            _check(
                "speculation",
                bad,
                "inactive",
                "the response carries no acceptance outputs (total_draft_tokens)",
                "a baseline deployment (speculative.mode none)? else check return_perf_metrics support",
            ),
            spec,
        )
    if not obs.drafted:
        return (
            _check(
                "speculation",
                bad,
                "inactive",
                "0 draft tokens proposed: speculative decoding is off",
                "check speculative.mode, the engine's max_draft_len, and num_draft_tokens for draft-target",
            ),
            spec,
        )
    if not obs.accepted:
        return (
            _check(
                "speculation",
                FAIL,
                "nothing accepted",
                f"{obs.drafted} draft tokens proposed, 0 accepted (acceptance length 1.0)",
                "draft and target disagree on every token: usually a tokenizer/vocabulary mismatch or a draft "
                "head trained for another target; see docs/runbooks/troubleshooting.md",
            ),
            spec,
        )
    length = f", {obs.length:.2f} tokens/step" if obs.length else ""
    return (
        _check(
            "speculation",
            OK,
            "active",
            f"accepted {obs.accepted}/{obs.drafted} draft tokens (rate {obs.rate:.2f}{length})",
        ),
        spec,
    )


def _verdict(report: HealthReport) -> str:
    failed = [c for c in report.checks if c.status == FAIL]
    spec = report.check("speculation")
    if failed:
        first = failed[0]
        return f"UNHEALTHY: {first.name}: {first.value}" + (f" ({first.detail})" if first.detail else "")
    if spec is not None and spec.status == OK:
        return f"HEALTHY: {report.model} serving at {report.url}, speculation {spec.value}: {spec.detail}"
    if spec is not None and spec.status in (WARN, SKIP):
        return f"SERVING: {report.model} at {report.url}; speculation {spec.value}"
    return f"HEALTHY: {report.model} serving at {report.url}"
