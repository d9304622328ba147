"""RUNBOOK.md commands survive hostile repository paths.

The repository is rendered into a directory named by each hostile string; every bash block of
RUNBOOK.md must parse (`bash -n`), and the commands must hand the path to their tool as one
argument (shlex, which follows the POSIX shell's quoting rules, splits them back).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _hostile import CORPUS  # noqa: E402

from toolkit.repo.errors import RenderError  # noqa: E402
from toolkit.repo.runbook import runbook  # noqa: E402

from .conftest import make_recipe  # noqa: E402

CASES = [("reference", "eagle3"), ("engine", "draft_target"), ("llmapi", "ngram")]


@pytest.mark.parametrize("backend,mode", CASES)
@pytest.mark.parametrize("label", sorted(CORPUS))
def test_runbook_commands_quote_the_repository_path(label, backend, mode, render, tmp_path):
    recipe = make_recipe(backend, mode)
    out = tmp_path / CORPUS[label] / "repo"
    if "${" in CORPUS[label]:  # refused: the rendered files would look like unfilled templates
        with pytest.raises(RenderError, match=r"'\$\{' left in the output") as e:
            render(backend, mode, recipe=recipe, out=out)
        assert "no path sdtk writes" in (e.value.hint or "") and not out.exists()
        return
    result = render(backend, mode, recipe=recipe, out=out)
    with open(result.path / "RUNBOOK.md", encoding="utf-8", newline="") as f:  # keep a CR as it is
        text = f.read()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    assert blocks
    for block in blocks:
        check = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, (block, check.stderr)
    ctx = runbook(recipe, result)
    assert ctx["launch"] in text
    words = shlex.split(ctx["launch"])
    assert f"--model-repository={result.path}" in words
    assert shlex.split(ctx["llmapi_dest"]) == [f"{result.path}/{result.entry_model}/1/"]
    if backend == "llmapi":
        assert f"cp /tmp/TensorRT-LLM/{ctx['llmapi_source']}/*.py {ctx['llmapi_dest']}" in text
