"""Preflight: cheap checks that catch a broken deployment before hours of conversion.

Every check returns a record (passed / failed / skipped + detail + hint). A check that needs
files which could not be resolved says "skipped (not resolved: …)"; it never passes silently.
Checks based on architecture numbers may use the catalogue and say so. After all checks ran,
`raise_failures` turns the failures into one `PreflightFailed` (a `PreflightError`) that names
both sides of the first mismatch and the fix, and carries every record.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from toolkit import modes
from toolkit.build.context import DTYPE_BYTES, BuildContext
from toolkit.checks import FAILED, PASSED, SKIPPED, Check
from toolkit.errors import PreflightError
from toolkit.hub import ModelFacts, Resolved, eagle3_vocab_map, medusa_heads
from toolkit.modes import EAGLE3
from toolkit.modes.lookahead import check_draft_len as check_lookahead_draft_len
from toolkit.recipe import Eagle3, Lookahead, Medusa

CheckResult = Check  # a preflight verdict: passed | failed | skipped


class PreflightFailed(PreflightError):
    """One or more preflight checks failed; `results` holds every check, `failed` the failures."""

    def __init__(self, failed: list[CheckResult], results: list[CheckResult]):
        first = failed[0]
        msg = first.detail
        if len(failed) > 1:
            msg += f" (and {len(failed) - 1} more failed check(s): {', '.join(f.name for f in failed[1:])})"
        super().__init__(first.name, msg, hint=first.hint)
        self.failed = failed
        self.results = results


def raise_failures(results: list[CheckResult]) -> None:
    failed = [r for r in results if r.status == FAILED]
    if failed:
        raise PreflightFailed(failed, results)


def not_resolved(name: str, *rs: Resolved, what: str = "files") -> CheckResult:
    why = "; ".join(f"{r.label}: {r.reason or 'no ' + what}" for r in rs)
    return CheckResult(name, SKIPPED, f"skipped (not resolved: {why})")


# --------------------------------------------------------------------------- sources


def check_sources(ctx: BuildContext, needs: dict[str, str | None]) -> list[CheckResult]:
    """One record per source. `needs[role]`: None (nothing), "files" (config/tokenizer), "weights"."""
    out = []
    missing: list[str] = []  # local paths: no plan can run without them, not even a dry run's
    for role, r in ctx.sources.items():
        need = needs.get(role)
        name = f"source:{role}"
        where = f"{r.path} ({r.how}" + (f", commit {r.commit}" if r.commit else "") + ")"
        if r.resolved and (need != "weights" or r.weights):
            out.append(CheckResult(name, PASSED, f"{r.ref} → {where}; facts from {r.facts.source}"))
            continue
        if r.convert_to is not None:  # a dry run: the build converts the GGUF file it found
            out.append(CheckResult(name, SKIPPED, f"skipped (dry run: {r.ref} {r.reason})"))
            continue
        if r.repo is None and not r.resolved:
            missing.append(f"models.{role} {r.ref} ({r.reason or 'no such directory'})")
            continue
        if need is None:
            reason = r.reason or "weights not downloaded"
            out.append(
                CheckResult(
                    name,
                    SKIPPED,
                    f"skipped (not resolved: {r.ref}: {reason}); planning with facts from {r.facts.source}",
                )
            )
            continue
        if r.resolved:
            detail = f"{r.ref} has no weight files in {r.path}"
        else:
            detail = f"{r.ref} could not be resolved: {r.reason}"
        hint = (
            "check the path"
            if r.repo is None
            else f"download it first (`hf download {r.repo}`"
            + (f" --revision {r.revision}" if r.revision else "")
            + "), unset HF_HUB_OFFLINE, or set HF_TOKEN for gated models; or use --dry-run"
        )
        out.append(CheckResult(name, FAILED, detail, hint))
    if missing:
        out.insert(
            0,
            CheckResult(
                "source:paths",
                FAILED,
                "missing local path(s): " + "; ".join(missing),
                "check the paths (relative paths are relative to the recipe file)",
            ),
        )
    return out


# --------------------------------------------------------------------------- files and heads


def _fmt(f: ModelFacts, key: str) -> str:
    return f"{getattr(f, key)} (from {f.source})"


def check_target_tokenizer(ctx: BuildContext) -> CheckResult:
    tok_src = ctx.tokenizer_source()
    target = ctx.sources["target"]
    if tok_src.tokenizer is None:
        return not_resolved("target-tokenizer", tok_src, what="tokenizer files")
    tok = tok_src.tokenizer
    rows = target.facts.vocab_size
    if rows is not None and tok.vocab_size is not None and tok.vocab_size > rows:
        return CheckResult(
            "target-tokenizer",
            FAILED,
            f"tokenizer {tok_src.ref} has {tok.vocab_size} tokens but target {target.ref} has only "
            f"{_fmt(target.facts, 'vocab_size')} embedding rows",
            "use the target's own tokenizer (drop models.tokenizer) or a tokenizer of the same family",
        )
    return CheckResult(
        "target-tokenizer",
        PASSED,
        f"{tok.kind} {tok.vocab_size} tokens, fingerprint {tok.fingerprint}, bos {tok.bos_token_id}, "
        f"eos {tok.eos_token_id}; embedding rows {rows}",
    )


def check_draft_target(ctx: BuildContext) -> list[CheckResult]:
    target, draft = ctx.sources["target"], ctx.sources["draft"]
    tok_t, tok_d = ctx.tokenizer_source(), draft
    out = []
    tv, dv = target.facts.vocab_size, draft.facts.vocab_size
    if tv is None or dv is None:
        out.append(
            CheckResult(
                "vocab-size",
                SKIPPED,
                f"skipped (not resolved: vocab size unknown for "
                f"{target.ref if tv is None else draft.ref}, not in the catalogue)",
            )
        )
    elif tv != dv:
        out.append(
            CheckResult(
                "vocab-size",
                FAILED,
                f"draft {draft.ref} has vocab_size {_fmt(draft.facts, 'vocab_size')} but target {target.ref} has "
                f"{_fmt(target.facts, 'vocab_size')}; draft-target needs the same tokenizer",
                "pick a draft from the target's model family (same tokenizer), e.g. a smaller sibling model",
            )
        )
    else:
        out.append(
            CheckResult(
                "vocab-size",
                PASSED,
                f"draft and target both have vocab_size {tv} "
                f"(from {draft.facts.source} / {target.facts.source})",
            )
        )
    a, b = tok_d.tokenizer, tok_t.tokenizer
    if a is None or b is None:
        out.append(
            not_resolved(
                "tokenizer-match",
                *[r for r, t in ((tok_d, a), (tok_t, b)) if t is None],
                what="tokenizer files",
            )
        )
        return out
    same = a.fingerprint == b.fingerprint
    if not same and not (a.comparable and b.comparable) and a.vocab_size == b.vocab_size:
        out.append(
            CheckResult(
                "tokenizer-match",
                PASSED,
                f"tokenizer files differ ({a.kind}); vocab sizes match ({a.vocab_size}); token tables not "
                "compared (no tokenizer.json)",
            )
        )
    elif not same:
        out.append(
            CheckResult(
                "tokenizer-match",
                FAILED,
                f"draft tokenizer {tok_d.ref} ({a.vocab_size} tokens, fingerprint {a.fingerprint}) differs from "
                f"target tokenizer {tok_t.ref} ({b.vocab_size} tokens, fingerprint {b.fingerprint}); draft tokens "
                "would be verified as different token ids",
                "use a draft trained with the target's tokenizer (same model family)",
            )
        )
    else:
        out.append(
            CheckResult(
                "tokenizer-match",
                PASSED,
                f"same token table ({a.vocab_size} tokens, fingerprint {a.fingerprint})",
            )
        )
    return out


def check_head_fit(ctx: BuildContext, role: str) -> CheckResult:
    """Head width and vocabulary against the base (architecture numbers; catalogue allowed)."""
    target, head = ctx.sources["target"], ctx.sources[role]
    tf, hf = target.facts, head.facts
    if not tf.known or not hf.known:
        missing = target if not tf.known else head
        return CheckResult(
            "head-fit",
            SKIPPED,
            f"skipped (not resolved: {missing.ref}: no config.json and not in the catalogue)",
        )
    if not (hf.hidden_size and tf.hidden_size) and not (hf.vocab_size and tf.vocab_size):
        return CheckResult(
            "head-fit", SKIPPED, f"skipped (not resolved: width and vocabulary of {head.ref} unknown)"
        )
    problems = []
    if hf.hidden_size and tf.hidden_size and hf.hidden_size != tf.hidden_size:
        problems.append(
            f"{role} {head.ref} has hidden_size {_fmt(hf, 'hidden_size')} but target {target.ref} has "
            f"{_fmt(tf, 'hidden_size')}"
        )
    if hf.vocab_size and tf.vocab_size and hf.vocab_size != tf.vocab_size:
        problems.append(
            f"{role} {head.ref} has vocab_size {_fmt(hf, 'vocab_size')} but target {target.ref} has "
            f"{_fmt(tf, 'vocab_size')}"
        )
    if ctx.mode == EAGLE3 and hf.draft_vocab_size and tf.vocab_size and hf.draft_vocab_size > tf.vocab_size:
        problems.append(
            f"draft_vocab_size {hf.draft_vocab_size} exceeds the target vocabulary {tf.vocab_size}"
        )
    if problems:
        return CheckResult(
            "head-fit",
            FAILED,
            "; ".join(problems),
            f"use a {ctx.mode} head trained for {target.ref} (same width and vocabulary)",
        )
    detail = f"hidden_size {hf.hidden_size} = {tf.hidden_size}, vocab_size {hf.vocab_size} = {tf.vocab_size}"
    if hf.draft_vocab_size:
        detail += f", draft_vocab_size {hf.draft_vocab_size}"
    return CheckResult("head-fit", PASSED, detail + f" (head from {hf.source}, target from {tf.source})")


def check_medusa_heads(ctx: BuildContext) -> CheckResult:
    target, head = ctx.sources["target"], ctx.sources["medusa_heads"]
    if head.path is None:
        return not_resolved("medusa-heads", head)
    found = medusa_heads(head.path)
    if found is None:
        return CheckResult(
            "medusa-heads", SKIPPED, f"skipped (not resolved: no readable Medusa head weights in {head.path})"
        )
    spec = ctx.recipe.spec_as(Medusa)
    want = spec.num_medusa_heads or head.facts.medusa_num_heads_config
    problems = []
    if want and found["num_heads"] < want:
        problems.append(f"the recipe uses {want} Medusa heads but {head.ref} has {found['num_heads']}")
    depth = max(len(c) for c in spec.choices)
    if depth > found["num_heads"]:
        problems.append(f"the tree is {depth} deep but {head.ref} has {found['num_heads']} heads")
    th, tv = target.facts.hidden_size, target.facts.vocab_size
    if th and found["hidden_size"] != th:
        problems.append(
            f"Medusa heads {head.ref} are {found['hidden_size']} wide but target {target.ref} has "
            f"hidden_size {_fmt(target.facts, 'hidden_size')}"
        )
    if tv and found["vocab_size"] != tv:
        problems.append(
            f"Medusa heads {head.ref} predict {found['vocab_size']} tokens but target {target.ref} has "
            f"vocab_size {_fmt(target.facts, 'vocab_size')}"
        )
    if problems:
        return CheckResult(
            "medusa-heads",
            FAILED,
            "; ".join(problems),
            "use Medusa heads trained for this target, and num_medusa_heads ≤ the heads it has",
        )
    return CheckResult(
        "medusa-heads",
        PASSED,
        f"{found['num_heads']} heads × {found['hidden_size']} → {found['vocab_size']} in the weights "
        f"(config.json says {head.facts.medusa_num_heads_config}); using {want or found['num_heads']}",
    )


def check_eagle3_vocab_map(ctx: BuildContext) -> CheckResult:
    target, head = ctx.sources["target"], ctx.sources["eagle_head"]
    if head.path is None:
        return not_resolved("eagle3-vocab-map", head)
    m = eagle3_vocab_map(head.path)
    dv = head.facts.draft_vocab_size
    tv = target.facts.vocab_size
    if m is None:
        if dv and tv and dv != tv:
            return CheckResult(
                "eagle3-vocab-map",
                SKIPPED,
                f"skipped (not resolved: draft_vocab_size {dv} ≠ "
                f"target vocab {tv} but no d2t tensor readable in {head.path})",
            )
        return CheckResult(
            "eagle3-vocab-map", PASSED, f"no d2t: the head predicts the full vocabulary ({dv or tv})"
        )
    problems = []
    if dv and m["d2t_len"] != dv:
        problems.append(f"d2t has {m['d2t_len']} entries but draft_vocab_size is {dv}")
    if tv and m.get("max_target_id", 0) >= tv:
        problems.append(
            f"d2t maps draft ids up to target id {m['max_target_id']} but target {target.ref} has "
            f"vocab_size {tv}"
        )
    if m.get("min_target_id", 0) < 0:
        problems.append(f"d2t maps a draft id to the negative target id {m['min_target_id']}")
    if tv and m.get("t2d_len") not in (None, tv):
        problems.append(f"t2d has {m['t2d_len']} entries but the target vocabulary has {tv}")
    if problems:
        return CheckResult(
            "eagle3-vocab-map",
            FAILED,
            f"EAGLE-3 head {head.ref}: " + "; ".join(problems),
            "use an EAGLE-3 head trained for this target (its d2t maps into the target vocabulary)",
        )
    return CheckResult(
        "eagle3-vocab-map",
        PASSED,
        f"d2t {m['d2t_len']} draft ids → target ids "
        f"[{m.get('min_target_id')}, {m.get('max_target_id')}] < {tv}",
    )


def eagle3_default_layers(n: int) -> list[int]:
    """TRT-LLM / ModelOpt convention: outputs of layers {1, L//2-1, L-4} (llm_args.py
    `eagle3_layers_to_capture`). The official EAGLE code takes the inputs of {2, L//2, L-3}:
    the same tensors, numbered one higher."""
    return [1, n // 2 - 1, n - 4]


def check_eagle3_layers(ctx: BuildContext) -> CheckResult:
    target, head = ctx.sources["target"], ctx.sources["eagle_head"]
    n = target.facts.num_hidden_layers
    ids = ctx.recipe.spec_as(Eagle3).layers_to_capture
    origin = "recipe speculative.layers_to_capture"
    if ids is None and head.facts.layers_to_capture:
        ids, origin = head.facts.layers_to_capture, f"head config ({head.facts.source})"
    if n is None:
        return CheckResult(
            "eagle3-layers", SKIPPED, f"skipped (not resolved: layer count of {target.ref} unknown)"
        )
    default = eagle3_default_layers(n)
    if ids is None:
        return CheckResult(
            "eagle3-layers", PASSED, f"default capture layers {default} of {n} (TRT-LLM convention)"
        )
    ids = sorted(ids)
    official = sorted([2, n // 2, n - 3])
    # Only ids written into the recipe are checked for the off-by-one: a head's own config (ModelOpt
    # export) already uses the TRT-LLM numbering, whatever layers it chose.
    if ids == official and ids != sorted(default) and origin.startswith("recipe"):
        return CheckResult(
            "eagle3-layers",
            FAILED,
            f"{origin} {ids} uses the official EAGLE convention (inputs of layers {{2, L//2, L-3}}); TRT-LLM and "
            f"ModelOpt number the same tensors as outputs of {{1, L//2-1, L-4}} = {default} for L={n}",
            f"set speculative.layers_to_capture: {default} (or drop it to use the default)",
        )
    bad = [i for i in ids if not 0 <= i < n]
    if bad:
        return CheckResult(
            "eagle3-layers",
            FAILED,
            f"{origin} {ids} names layer(s) {bad} but target {target.ref} has {n} layers (0..{n - 1})",
            f"use layer ids in 0..{n - 1}; the default is {default}",
        )
    return CheckResult(
        "eagle3-layers", PASSED, f"{origin} {ids} within 0..{n - 1} (default would be {default})"
    )


def check_lookahead(ctx: BuildContext) -> CheckResult:
    return check_lookahead_draft_len(ctx.recipe.spec_as(Lookahead))


# --------------------------------------------------------------------------- GPUs and memory


@dataclass
class Gpus:
    found: bool  # nvidia-smi ran
    memory_mib: list[int]  # per visible GPU
    detail: str

    @property
    def count(self) -> int:
        return len(self.memory_mib)


def visible_gpus(timeout: float = 10.0) -> Gpus:
    from toolkit.gpus import query_gpus

    q = query_gpus(timeout)
    if not q.found:
        return Gpus(False, [], q.error)
    mem = [g.memory_mib for g in q.visible()]
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        return Gpus(True, mem, f"{len(mem)} visible (CUDA_VISIBLE_DEVICES={cvd})")
    return Gpus(True, mem, f"{len(mem)} visible")


def check_gpus(ctx: BuildContext, gpus: Gpus | None) -> CheckResult:
    need = ctx.world_size
    if gpus is None:
        why = "dry run" if ctx.dry_run else f"backend {ctx.backend} runs on CPU"
        return CheckResult("gpus", SKIPPED, f"skipped ({why}; tp×pp = {need} GPU(s) needed at serve time)")
    if gpus.count < need:
        return CheckResult(
            "gpus",
            FAILED,
            f"tp×pp = {ctx.recipe.parallel.tp}×{ctx.recipe.parallel.pp} = {need} GPUs needed but {gpus.detail}",
            "lower parallel.tp/pp, or run where enough GPUs are visible (CUDA_VISIBLE_DEVICES)",
        )
    return CheckResult("gpus", PASSED, f"tp×pp = {need} ≤ {gpus.count} GPU(s) ({gpus.detail})")


def memory_estimate(ctx: BuildContext) -> dict | None:
    """Bytes per GPU: weights by dtype + KV cache at max_batch_size × max_seq_len (+ draft/heads).

    KV bytes = 2 × layers × kv_heads × head_dim × bytes × tokens. Everything is divided evenly over
    tp×pp GPUs (activations and runtime buffers are not counted)."""
    b = DTYPE_BYTES.get(ctx.dtype, 2)
    lim = ctx.recipe.build
    parts: dict[str, int] = {}
    draft_len = ctx.recipe.speculative.draft_len

    def model(role: str, seq_extra: int) -> bool:
        f = ctx.sources[role].facts
        if not f.parameters:
            return False
        parts[f"{role}_weights"] = f.parameters * b
        if f.head_kind is None and f.num_hidden_layers and f.num_key_value_heads and f.head_dim:
            tokens = lim.max_batch_size * (lim.max_seq_len + seq_extra)
            parts[f"{role}_kv_cache"] = (
                2 * f.num_hidden_layers * f.num_key_value_heads * f.head_dim * b * tokens
            )
        return True

    if not model("target", draft_len):
        return None
    for role in modes.SOURCES:
        if role in ctx.sources:
            model(role, draft_len if role == "draft" else 0)
    total = sum(parts.values())
    return {"parts": parts, "total": total, "per_gpu": total // ctx.world_size, "dtype": ctx.dtype}


def _gib(n: int | float) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_memory(ctx: BuildContext, gpus: Gpus | None) -> CheckResult:
    est = memory_estimate(ctx)
    if est is None:
        return CheckResult("memory", SKIPPED, "skipped (not resolved: target parameter count unknown)")
    parts = ", ".join(f"{k} {_gib(v)}" for k, v in est["parts"].items())
    detail = f"estimate {_gib(est['per_gpu'])} per GPU ({parts}; {ctx.dtype}, over {ctx.world_size} GPU(s))"
    if gpus is None or not gpus.memory_mib:
        return CheckResult("memory", SKIPPED, f"skipped (no GPU visible to compare): {detail}")
    have = min(gpus.memory_mib) * 2**20
    if est["per_gpu"] > have:
        return CheckResult(
            "memory",
            FAILED,
            f"{detail} exceeds the smallest visible GPU ({_gib(have)})",
            "raise parallel.tp, or lower build.max_batch_size / build.max_seq_len",
        )
    return CheckResult("memory", PASSED, f"{detail} fits {_gib(have)}")


# --------------------------------------------------------------------------- all of them


def check_seq_len(ctx: BuildContext) -> CheckResult:
    """build.max_seq_len against the target's max_position_embeddings (the model's own bound)."""
    f = ctx.sources["target"].facts
    want = ctx.recipe.build.max_seq_len
    if f.max_position_embeddings is None:
        return CheckResult(
            "seq-len", SKIPPED, "skipped (not resolved: max_position_embeddings of the target unknown)"
        )
    if want > f.max_position_embeddings:
        return CheckResult(
            "seq-len",
            FAILED,
            f"build.max_seq_len {want} exceeds the target's max_position_embeddings "
            f"{_fmt(f, 'max_position_embeddings')}: positions beyond it were never trained",
            f"set build.max_seq_len to at most {f.max_position_embeddings} (and max_input_len below it)",
        )
    return CheckResult(
        "seq-len", PASSED, f"max_seq_len {want} ≤ max_position_embeddings {f.max_position_embeddings}"
    )


class _ModeChecks:
    """The shared checks a mode's preflight hook picks from (toolkit.modes.PreflightKit)."""

    draft_target = staticmethod(check_draft_target)
    head_fit = staticmethod(check_head_fit)
    medusa_heads = staticmethod(check_medusa_heads)
    eagle3_vocab_map = staticmethod(check_eagle3_vocab_map)
    eagle3_layers = staticmethod(check_eagle3_layers)


MODE_CHECKS = _ModeChecks()


def run_checks(ctx: BuildContext, *, gpus: Gpus | None) -> list[CheckResult]:
    """The mode- and resource-specific checks (sources and backend are checked by the caller)."""
    out = [check_target_tokenizer(ctx), check_seq_len(ctx)]
    out += modes.hooks(ctx.mode).preflight(ctx, MODE_CHECKS)  # the mode's own (toolkit/modes/<mode>.py)
    out += [check_gpus(ctx, gpus), check_memory(ctx, gpus)]
    return out
