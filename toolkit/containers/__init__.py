"""Where things are inside NVIDIA's `tritonserver:<yy.mm>-trtllm-python-py3` containers.

One JSON file per container under `toolkit/data/containers/` (tests/contracts/containers links to the
same folder) records, each fact with its upstream source:
- the TensorRT-LLM version, the Python interpreter (the `/opt/venv-tritonserver` venv from 26.03),
  the examples dir (convert_checkpoint.py scripts), the `all_models` dirs and the llmapi `model.py`:
  triton-inference-server/tensorrtllm_backend `dockerfile/Dockerfile.triton.trt_llm_backend` at the
  container's `r<yy.mm>` branch (`WORKDIR /app … COPY …/examples examples`);
- the `tritonserver` binary, the backends dir and whether the engine path (the `tensorrtllm`
  backend) ships: triton-inference-server/server `build.py` at the container's release tag
  (`WORKDIR /opt; COPY build/install tritonserver`);
- the Python and TensorRT-LLM versions NVIDIA states: server `docs/introduction/compatibility.md`
  ("Container Name: trtllm-python-py3"), where the Dockerfile pins none or another one.
A fact that could not be read at the container's tag carries `unverified` with the reason.

A container without a facts file (a release newer than the newest known) is never silently given
another container's facts: `layout()` marks every fact unverified, names the container whose paths
it assumes, and, inside that container (or under `root`), reads the installed TensorRT-LLM version
and probes the filesystem for each path (toolkit.containers.probe).

Build, deploy and selftest resolve paths through `layout()`; `$TRTLLM_EXAMPLES_DIR`, `$TRTLLM_DIR`,
`$TRITONSERVER` and `--tritonserver` still win over these facts. A `root` re-roots every container
path onto a directory tree (`sdtk selftest --dry-run --container-root DIR`).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath

from packaging.version import Version
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from toolkit.containers import release
from toolkit.errors import UsageError

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "containers"
# Every Triton container sets it: triton-inference-server/server build.py
# `ENV NVIDIA_TRITON_SERVER_VERSION ${TRITON_CONTAINER_VERSION}` (dockerfile_prepare_container_linux).
CONTAINER_ENV = "NVIDIA_TRITON_SERVER_VERSION"
_TAG = re.compile(r"^\d{2}\.\d{2}$")


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Source(_Closed):
    repository: str
    path: str
    ref: str  # tag or release branch
    commit: str | None  # None: the repository could not be read at `ref` here


class Fact(_Closed):
    value: str
    source: str  # a key of ContainerFacts.sources
    quote: str  # the upstream line(s) the value is read from
    unverified: str | None  # why the value could not be checked at the container's tag

    @property
    def verified(self) -> bool:
        return self.unverified is None


# The facts that are absolute in-container paths.
PATH_FACTS = (
    "python", "examples_dir", "all_models_dir", "scripts_dir", "inflight_batcher_llm_dir",
    "llmapi_model_py", "tritonserver", "backends_dir", "tensorrtllm_backend_dir", "python_backend_dir",
)  # fmt: skip


class ContainerFacts(_Closed):
    container: str
    image: str
    sources: dict[str, Source]
    trtllm_version: Fact
    python_version: Fact
    python: Fact  # the interpreter on PATH first (the venv's from 26.03)
    engine_path: Fact  # "yes" | "no": the tensorrtllm (C++) backend and trtllm-build ship
    examples_dir: Fact
    all_models_dir: Fact
    scripts_dir: Fact
    inflight_batcher_llm_dir: Fact
    llmapi_model_py: Fact
    tritonserver: Fact
    backends_dir: Fact
    tensorrtllm_backend_dir: Fact
    python_backend_dir: Fact
    converters: dict[str, Fact]  # script key → path relative to examples_dir
    notes: list[str] = []

    @model_validator(mode="after")
    def _check(self) -> ContainerFacts:
        if not _TAG.match(self.container):
            raise ValueError(f"container '{self.container}' is not <yy.mm>")
        for name, f in self.facts().items():
            if f.source not in self.sources:
                raise ValueError(f"{name}: source '{f.source}' is not one of {sorted(self.sources)}")
            if f.unverified is None and self.sources[f.source].commit is None:
                raise ValueError(f"{name}: verified, but its source was not read at a commit")
        if self.engine_path.value not in ("yes", "no"):
            raise ValueError(f"engine_path: '{self.engine_path.value}' is not yes or no")
        for name in PATH_FACTS:
            if not PurePosixPath(getattr(self, name).value).is_absolute():
                raise ValueError(f"{name}: '{getattr(self, name).value}' is not an absolute path")
        for key, f in self.converters.items():
            if PurePosixPath(f.value).is_absolute() or ".." in PurePosixPath(f.value).parts:
                raise ValueError(f"converters.{key}: '{f.value}' must be relative to examples_dir")
        return self

    def facts(self) -> dict[str, Fact]:
        """Every fact by its dotted name."""
        out = {k: v for k, v in self.__dict__.items() if isinstance(v, Fact)}
        out.update({f"converters.{k}": v for k, v in self.converters.items()})
        return out

    def cite(self, name: str) -> str:
        """`repository path @ref (commit)` for one fact, plus `; unverified: …` where it applies."""
        f = self.facts()[name]
        s = self.sources[f.source]
        at = f"@{s.ref}" + (f" ({s.commit[:7]})" if s.commit else "")
        return f"{s.repository} {s.path} {at}" + (f"; unverified: {f.unverified}" if f.unverified else "")

    def version(self) -> Version | None:
        return release.parse(self.trtllm_version.value)

    def unverified(self) -> dict[str, str]:
        """Every fact that could not be checked for this container, with why."""
        return {n: f.unverified for n, f in self.facts().items() if f.unverified is not None}

    def files(self) -> list[str]:
        """Every file a deployment in this container may run or copy (absolute, in-container)."""
        ex = PurePosixPath(self.examples_dir.value)
        return [
            self.python.value,
            self.tritonserver.value,
            self.llmapi_model_py.value,
            *(str(ex / f.value) for f in self.converters.values()),
        ]

    def dirs(self) -> list[str]:
        """Every directory these facts name (absolute, in-container)."""
        return [
            getattr(self, n).value
            for n in ("examples_dir", "all_models_dir", "scripts_dir", "inflight_batcher_llm_dir",
                      "backends_dir", "tensorrtllm_backend_dir", "python_backend_dir")
        ]  # fmt: skip


def _load(path: Path) -> ContainerFacts:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        facts = ContainerFacts.model_validate(data)
    except (OSError, ValueError, ValidationError) as e:
        raise UsageError(f"container facts {path} are invalid: {e}") from None
    if facts.container != path.stem:
        raise UsageError(f"container facts {path} describe '{facts.container}', not '{path.stem}'")
    return facts


@cache
def all_facts() -> dict[str, ContainerFacts]:
    """Every known container, oldest first."""
    return {p.stem: _load(p) for p in sorted(DATA_DIR.glob("*.json"))}


def get(tag: str) -> ContainerFacts:
    """The facts of a known container; UsageError for one without a facts file (see `layout()`,
    which marks such a container's facts unverified and probes it instead)."""
    known = all_facts()
    if tag not in known:
        raise UsageError(
            f"no layout facts for container '{tag}'",
            hint="known containers: " + ", ".join(known) + " (toolkit/data/containers/)",
        )
    return known[tag]


def check_tag(tag: str) -> str:
    """`tag` when it is a container release name (<yy.mm>); UsageError otherwise."""
    if not _TAG.match(tag):
        raise UsageError(f"container '{tag}' is not a release name <yy.mm> (e.g. 26.07)")
    return tag


def newest() -> ContainerFacts:
    return list(all_facts().values())[-1]


def ngc_tritonserver() -> str:
    """The tritonserver binary of NVIDIA's containers: the newest one's (the same path in every
    one from 25.06 on). The one definition: runbooks, Kubernetes, Slurm and discovery read it."""
    return newest().tritonserver.value


def for_version(trtllm_version: str | None) -> ContainerFacts | None:
    """The newest container that carries TensorRT-LLM `trtllm_version` (the same major.minor.patch:
    a pre-release or build suffix on either side is ignored, see toolkit.containers.release)."""
    if not trtllm_version or release.parse(trtllm_version) is None:
        return None
    found = [
        c
        for c in all_facts().values()
        if release.parse(c.trtllm_version.value) is not None
        and release.same_release(c.trtllm_version.value, trtllm_version)
    ]
    return found[-1] if found else None


@dataclass(frozen=True)
class Layout:
    """One container's facts, optionally re-rooted onto a directory tree, and why it was chosen.
    `known` is False for a container without a facts file: its facts are assumed (every one marked
    unverified) and, where `probed`, checked against the container's filesystem."""

    facts: ContainerFacts
    why: str
    root: Path | None = None  # None: the real filesystem ("/")
    known: bool = True
    probed: bool = False  # the filesystem (and the installed TensorRT-LLM) was read

    @property
    def container(self) -> str:
        return self.facts.container

    def host(self, path: str | PurePosixPath) -> Path:
        """Where an in-container absolute path is on this machine (under `root` when set)."""
        p = PurePosixPath(path)
        if self.root is None or not p.is_absolute():
            return Path(p)
        return self.root.joinpath(*p.parts[1:])

    @property
    def examples_dir(self) -> PurePosixPath:
        return PurePosixPath(self.facts.examples_dir.value)

    @property
    def tritonserver(self) -> PurePosixPath:
        return PurePosixPath(self.facts.tritonserver.value)

    @property
    def python(self) -> PurePosixPath:
        return PurePosixPath(self.facts.python.value)

    @property
    def llmapi_model_dir(self) -> PurePosixPath:
        return PurePosixPath(self.facts.llmapi_model_py.value).parent

    def converter(self, key: str) -> str:
        return self.facts.converters[key].value

    def unverified(self) -> dict[str, str]:
        """The facts not verified for this container, with why (all of them for an unknown one)."""
        return self.facts.unverified()

    def describe(self) -> str:
        rooted = f", re-rooted at {self.root}" if self.root is not None else ""
        if self.known:
            return f"container {self.container} layout ({self.why}{rooted})"
        return (
            f"container {self.container}: NO FACTS in toolkit/data/containers/ ({self.why}{rooted}); "
            f"{len(self.unverified())} fact(s) unverified"
        )


def layout(
    *, trtllm_version: str | None = None, container: str | None = None, root: Path | str | None = None
) -> Layout:
    """The container layout paths resolve against, in order: `container`; `$NVIDIA_TRITON_SERVER_VERSION`
    (set inside every Triton container); the newest container carrying `trtllm_version`; the newest
    container known.

    A requested or running container without a facts file gets probed facts (toolkit.containers.probe):
    never another container's facts without saying so."""
    from toolkit.containers import probe

    r = Path(root).expanduser().resolve() if root is not None else None
    env = os.environ.get(CONTAINER_ENV, "").strip()
    if container:
        if container in all_facts():
            return Layout(get(container), "requested", r)
        inside = env == container
        return probe.unknown(check_tag(container), "requested", root=r, inside=inside)
    if env in all_facts():
        return Layout(get(env), f"${CONTAINER_ENV}={env}", r)
    if env and _TAG.match(env):
        return probe.unknown(env, f"${CONTAINER_ENV}={env}", root=r, inside=True)
    by_version = for_version(trtllm_version)
    if by_version is not None:
        return Layout(by_version, f"ships TensorRT-LLM {by_version.trtllm_version.value}", r)
    latest = newest()
    why = (
        f"no known container ships TensorRT-LLM {trtllm_version}; newest known"
        if trtllm_version
        else "newest known"
    )
    if env:
        why += f" (${CONTAINER_ENV}={env} is not a release name)"
    return Layout(latest, why, r)
