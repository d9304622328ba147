"""Facts for a container sdtk has no facts file for (a release newer than the newest known).

Such a container never silently gets another container's facts. Its facts start as the newest known
container's paths, each marked unverified ("assumed as in 26.07"); then, inside the container (or
under a directory tree standing in for it), every path fact is probed (the assumed path first, then
the other layouts NVIDIA has used) and the TensorRT-LLM version is read from the installed package.
What was probed says where it was found; what was not (a dry run outside the container) says what
will be probed. Every fact stays unverified: nothing upstream was read for this container.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path, PurePosixPath

from toolkit.containers import PATH_FACTS, ContainerFacts, Fact, Layout, Source, newest

REGISTRY = "nvcr.io/nvidia/tritonserver"
SUFFIX = "trtllm-python-py3"

# Other places each path fact has had (tensorrtllm_backend Dockerfile: /usr/bin/python3 up to r26.02,
# the /opt/venv-tritonserver venv from r26.03; the TensorRT-LLM release image's /app/tensorrt_llm tree).
ALTERNATIVES: dict[str, tuple[str, ...]] = {
    "python": ("/opt/venv-tritonserver/bin/python3", "/usr/bin/python3"),
    "examples_dir": ("/app/examples", "/app/tensorrt_llm/examples"),
    "all_models_dir": ("/app/all_models", "/app/tensorrt_llm/triton_backend/all_models"),
    "scripts_dir": ("/app/scripts", "/app/tensorrt_llm/triton_backend/scripts"),
    "inflight_batcher_llm_dir": (
        "/app/all_models/inflight_batcher_llm",
        "/app/tensorrt_llm/triton_backend/all_models/inflight_batcher_llm",
    ),
    "llmapi_model_py": (
        "/app/all_models/llmapi/tensorrt_llm/1/model.py",
        "/app/tensorrt_llm/triton_backend/all_models/llmapi/tensorrt_llm/1/model.py",
    ),
}
# Where a tensorrt_llm wheel's metadata lies in the image (the venv from 26.03, the system before).
DIST_INFO_GLOBS = (
    "opt/venv-tritonserver/lib/python3*/site-packages/tensorrt_llm-*.dist-info",
    "usr/local/lib/python3*/dist-packages/tensorrt_llm-*.dist-info",
    "usr/lib/python3/dist-packages/tensorrt_llm-*.dist-info",
)
_DIST = re.compile(r"^tensorrt_llm-(?P<v>[^-]+)\.dist-info$")
PROBE = "probe"  # the source key of probed facts


def installed_trtllm_version() -> str | None:
    """The tensorrt_llm version installed in this Python, from package metadata (importing it costs
    seconds)."""
    for dist in ("tensorrt_llm", "tensorrt-llm"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _host(root: Path, path: str) -> Path:
    return root.joinpath(*PurePosixPath(path).parts[1:])


def _dist_info_version(root: Path) -> tuple[str, str] | None:
    """(version, in-container dist-info dir) of a tensorrt_llm wheel installed under `root`."""
    for pattern in DIST_INFO_GLOBS:
        for p in sorted(root.glob(pattern)):
            m = _DIST.match(p.name)
            if m:
                return m.group("v"), "/" + str(p.relative_to(root))
    return None


def _trtllm_fact(tag: str, base: ContainerFacts, root: Path | None, inside: bool) -> Fact:
    no_facts = f"no upstream facts for container {tag}"
    if inside and root is None and (v := installed_trtllm_version()) is not None:
        return Fact(value=v, source=PROBE, quote="importlib.metadata.version('tensorrt_llm')",
                    unverified=f"{no_facts}; read from the installed tensorrt_llm package")  # fmt: skip
    if root is not None or inside:
        found = _dist_info_version(root or Path("/"))
        if found is not None:
            return Fact(value=found[0], source=PROBE, quote=found[1],
                        unverified=f"{no_facts}; read from the installed wheel's metadata ({found[1]})")  # fmt: skip
        how = "no tensorrt_llm package found in the container"
    else:
        how = "inside the container sdtk reads the installed tensorrt_llm version instead"
    return base.trtllm_version.model_copy(
        update={
            "unverified": f"{no_facts}; assumed {base.trtllm_version.value}, as in {base.container} "
            f"(the newest known); {how}"
        }  # fmt: skip
    )


def _path_fact(name: str, tag: str, base: ContainerFacts, root: Path | None, probing: bool) -> Fact:
    f: Fact = getattr(base, name)
    cands = list(dict.fromkeys((f.value, *ALTERNATIVES.get(name, ()))))
    assumed = (
        f"no upstream facts for container {tag}; assumed {f.value}, as in {base.container} (the newest known)"
    )
    if not probing:
        return f.model_copy(
            update={"unverified": f"{assumed}; inside the container sdtk probes {', '.join(cands)}"}
        )
    where = root or Path("/")
    hit = next((c for c in cands if _host(where, c).exists()), None)
    if hit is None:
        return Fact(value=f.value, source=PROBE, quote="; ".join(cands),
                    unverified=f"{assumed}; probed {', '.join(cands)}: none found")  # fmt: skip
    return Fact(value=hit, source=PROBE, quote=hit,
                unverified=f"no upstream facts for container {tag}; probed: found {hit}")  # fmt: skip


def _engine_fact(tag: str, base: ContainerFacts, backend_dir: Fact, root: Path | None, probing: bool) -> Fact:
    f = base.engine_path
    if not probing:
        return f.model_copy(update={"unverified": (
            f"no upstream facts for container {tag}; assumed '{f.value}', as in {base.container}; inside the "
            f"container sdtk looks for libtriton_tensorrtllm*.so in {backend_dir.value}")})  # fmt: skip
    libs = sorted(
        (root or Path("/"))
        .joinpath(*PurePosixPath(backend_dir.value).parts[1:])
        .glob("libtriton_tensorrtllm*.so")
    )
    return Fact(value="yes" if libs else "no", source=PROBE, quote=f"{backend_dir.value}/libtriton_tensorrtllm*.so",
                unverified=f"no upstream facts for container {tag}; probed: "
                + (f"found {libs[0].name}" if libs else "no libtriton_tensorrtllm*.so"))  # fmt: skip


def unknown(tag: str, why: str, *, root: Path | None, inside: bool) -> Layout:
    """The layout of container `tag`, which has no facts file: the newest known container's facts,
    every one marked unverified, probed where the container's filesystem is at hand (`inside` it,
    or under `root`)."""
    base = newest()
    probing = inside or root is not None
    facts = {n: _path_fact(n, tag, base, root, probing) for n in PATH_FACTS}
    facts["engine_path"] = _engine_fact(tag, base, facts["tensorrtllm_backend_dir"], root, probing)
    facts["trtllm_version"] = _trtllm_fact(tag, base, root, inside)
    py = base.python_version
    facts["python_version"] = py.model_copy(
        update={
            "unverified": f"no upstream facts for container {tag}; assumed {py.value}, as in {base.container}"
        }
    )
    converters = {
        k: f.model_copy(
            update={
                "unverified": f"no upstream facts for container {tag}; assumed as in {base.container}"
                " (the converter preflight checks the file)"
            }
        )  # fmt: skip
        for k, f in base.converters.items()
    }
    sources = {**base.sources, PROBE: Source(repository="the container's filesystem", path=str(root or "/"),
                                             ref=tag, commit=None)}  # fmt: skip
    assumed = ContainerFacts(
        container=tag,
        image=f"{REGISTRY}:{tag}-{SUFFIX}",
        sources=sources,
        converters=converters,
        notes=[
            f"No facts file for {tag}: every fact is unverified. Paths are assumed as in {base.container}, the "
            "newest known container"
            + ("; each was probed in the container's filesystem." if probing else
               "; inside the container (or with --container-root) sdtk probes them and reads the installed "
               "TensorRT-LLM version."),
            *base.notes,
        ],
        **facts,
    )  # fmt: skip
    detail = "probed" if probing else f"assumed from {base.container}, not probed"
    return Layout(assumed, f"{why}; {detail}", root, known=False, probed=probing)
