"""Container layout facts (`containers/<yy.mm>.json`, the same folder as toolkit/data/containers/).

Each file records, per NGC `tritonserver:<yy.mm>-trtllm-python-py3`, where the converter scripts, the
Triton models, the llmapi `model.py`, `tritonserver` and the backends are, each fact cited from
triton-inference-server/tensorrtllm_backend `dockerfile/Dockerfile.triton.trt_llm_backend` at the
`r<yy.mm>` branch or triton-inference-server/server `build.py` at the container's release tag. No
container is available here: the tests check the files against themselves, against sdtk's other
tables, and (where the mirrored upstream repositories exist) against the upstream text at the commit.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from toolkit import containers
from toolkit.build import engine
from toolkit.containers import images

HERE = Path(__file__).parent
MIRRORS = {
    "triton-inference-server/tensorrtllm_backend": Path(
        "/work/.mirror/triton-inference-server+tensorrtllm_backend/repo"
    ),
    "triton-inference-server/server": Path("/work/.mirror/triton-inference-server+server/repo"),
}
FACTS = containers.all_facts()


def test_one_home_for_the_facts():
    """tests/contracts/containers is the package data itself, not a copy."""
    assert (HERE / "containers").resolve() == containers.DATA_DIR.resolve()
    assert sorted(p.name for p in (HERE / "containers").glob("*.json")) == [f"{c}.json" for c in FACTS]


def test_every_container_from_25_06_to_25_12():
    assert list(FACTS) == ["25.06", "25.07", "25.08", "25.09", "25.10", "25.11", "25.12"]


@pytest.mark.parametrize("tag", list(FACTS))
def test_layout_of_each_container(tag):
    """The finding-2 fact: scripts at /app/examples (`WORKDIR /app … COPY tensorrt_llm/examples examples`),
    not /app/tensorrt_llm/examples (the TensorRT-LLM release image's layout)."""
    c = FACTS[tag]
    assert c.image == f"nvcr.io/nvidia/tritonserver:{tag}-trtllm-python-py3"
    assert c.examples_dir.value == "/app/examples" and c.examples_dir.verified
    assert c.all_models_dir.value == "/app/all_models" and c.all_models_dir.verified
    assert c.llmapi_model_py.value == "/app/all_models/llmapi/tensorrt_llm/1/model.py"
    assert c.tritonserver.value == "/opt/tritonserver/bin/tritonserver" and c.tritonserver.verified
    assert c.backends_dir.value == "/opt/tritonserver/backends" and c.backends_dir.verified
    assert c.python_version.value == "3.12" and c.python_version.verified
    assert c.sources["backend_dockerfile"].ref == f"r{tag}"
    # every converter the engine path can run is recorded
    assert set(engine.CONVERTERS.values()) | {engine.MEDUSA_CONVERTER, engine.EAGLE_CONVERTER} <= set(
        c.converters
    )
    for name, f in c.facts().items():
        assert f.quote, name
        assert f.verified or len(f.unverified or "") > 20, f"{name}: say why it is unverified"


@pytest.mark.parametrize("tag", list(FACTS))
def test_trtllm_version_agrees_with_the_compatibility_matrix(tag):
    """toolkit/containers/images.py holds Triton's release compatibility matrix; a container whose Dockerfile
    disagrees with it (25.11: tensorrt_llm==1.2.0rc2 vs 1.0.3.2510) must say so."""
    c = FACTS[tag]
    matrix = images.CONTAINER_TO_TRTLLM[tag]
    if c.trtllm_version.value != matrix:
        assert not c.trtllm_version.verified and "1.0.3" in (c.trtllm_version.unverified or "")
    assert containers.for_version("1.1.0").container == "25.12"
    assert containers.for_version("1.0.0").container == "25.10"


def test_tables_that_name_the_tritonserver_read_the_facts():
    from toolkit.repo import versions
    from toolkit.server import discover

    path = containers.newest().tritonserver.value
    assert containers.ngc_tritonserver() == str(discover.NGC_TRITONSERVER) == path
    assert {c.tritonserver.value for c in FACTS.values()} == {path}
    assert versions.LLMAPI_MODEL_DIRS[0] == "/app/all_models/llmapi/tensorrt_llm/1"


def test_layout_choice(monkeypatch):
    monkeypatch.delenv(containers.CONTAINER_ENV, raising=False)
    assert containers.layout().container == "25.12"
    assert containers.layout(trtllm_version="1.0.0").container == "25.10"
    assert containers.layout(trtllm_version="1.0.0", container="25.09").container == "25.09"
    monkeypatch.setenv(containers.CONTAINER_ENV, "25.08")  # set inside every Triton container
    assert containers.layout(trtllm_version="1.1.0").container == "25.08"
    lay = containers.layout(root="/tmp/ct")
    assert lay.host("/app/examples") == Path("/tmp/ct/app/examples")


def _upstream(repo: str, commit: str, path: str) -> str | None:
    mirror = MIRRORS.get(repo)
    if mirror is None or not mirror.is_dir():
        return None
    r = subprocess.run(
        ["git", "-C", str(mirror), "show", f"{commit}:{path}"], capture_output=True, text=True, check=False
    )
    return r.stdout if r.returncode == 0 else None


@pytest.mark.parametrize("tag", list(FACTS))
def test_quotes_are_upstream_text_at_the_commit(tag):
    """Every `quote` of a fact read at a commit occurs (each `; `-separated part) in that file there."""
    c = FACTS[tag]
    checked = 0
    for name, f in c.facts().items():
        src = c.sources[f.source]
        if src.commit is None:
            continue
        text = _upstream(src.repository, src.commit, src.path)
        if text is None:
            pytest.skip(f"{src.repository} is not mirrored here")
        for part in f.quote.split("; "):
            assert part in text, f"{tag} {name}: {part!r} not in {src.repository} {src.path}@{src.commit[:7]}"
        checked += 1
    assert checked >= 8
