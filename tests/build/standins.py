"""Stand-in TensorRT-LLM tools for the build tests (TensorRT-LLM cannot be installed here).

`trtllm-build`, the `convert_checkpoint.py` scripts and `nvidia-smi` are small Python scripts
that record their argv (JSON lines in $SDTK_STANDIN_LOG) and write what the real tools would (a
config.json and a rank0 file; the rank0 file first, so that a kill mid-step leaves a half-written
output), and a `tensorrt_llm-<version>.dist-info` makes importlib.metadata report a version to a
subprocess. STANDIN_SLEEP_BUILD / STANDIN_SLEEP_CONVERT make a tool sleep; STANDIN_STARTED names
a file the tool writes (`<tool> <pid>`) when it starts.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_TOOL = """#!{python}
import json, os, sys, time
from pathlib import Path
args = sys.argv[1:]
with open(os.environ["SDTK_STANDIN_LOG"], "a") as f:
    f.write(json.dumps({{"tool": {tool!r}, "argv": args}}) + "\\n")
out = Path(args[args.index("--output_dir") + 1])
out.mkdir(parents=True, exist_ok=True)
(out / {partial!r}).write_bytes(b"half-written")
if os.environ.get("STANDIN_STARTED"):
    Path(os.environ["STANDIN_STARTED"]).write_text({tool!r} + " " + str(os.getpid()))
time.sleep(float(os.environ.get("STANDIN_SLEEP_" + {key!r}, "0")))
(out / "config.json").write_text(json.dumps({{"standin": {tool!r}, "argv": args}}))
"""

# Answers `--query-gpu=<fields> --format=csv,noheader[,nounits]` as nvidia-smi does.
_SMI = """#!{python}
import os, sys
fields = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--query-gpu=")).split(",")
units = "nounits" not in " ".join(sys.argv)
for mib in os.environ.get("STANDIN_GPUS", "81559").split(","):
    if mib:
        value = {{"name": "NVIDIA Stand-in GPU", "memory.total": mib + (" MiB" if units else "")}}
        print(", ".join(value[f] for f in fields))
"""


@dataclass
class Standins:
    bin: Path
    examples: Path
    site: Path
    log: Path
    version: str

    def calls(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def env(self) -> dict[str, str]:
        """Environment for a subprocess that should see the same stand-ins."""
        return {
            **os.environ,
            "PATH": f"{self.bin}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join([str(self.site), str(REPO)]),
        }


def _script(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)


def make_standins(root: Path, version: str = "1.1.0") -> Standins:
    bin_ = root / "bin"
    examples = root / "examples"
    site = root / "site"
    log = root / "calls.jsonl"
    py = sys.executable
    _script(
        bin_ / "trtllm-build",
        _TOOL.format(python=py, tool="trtllm-build", partial="rank0.engine", key="BUILD"),
    )
    _script(bin_ / "nvidia-smi", _SMI.format(python=py))
    for rel in ("models/core/llama", "models/core/qwen", "medusa", "eagle"):
        _script(examples / rel / "convert_checkpoint.py",
                _TOOL.format(python=py, tool=f"{rel}/convert_checkpoint.py", partial="rank0.safetensors",
                             key="CONVERT"))  # fmt: skip
    dist = site / f"tensorrt_llm-{version}.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tensorrt_llm\nVersion: {version}\n")
    return Standins(bin_, examples, site, log, version)


def activate(s: Standins, monkeypatch) -> Standins:
    """Put the stand-ins on PATH, point TRTLLM_EXAMPLES_DIR at them and report their version."""
    from toolkit import compat

    monkeypatch.setenv("PATH", f"{s.bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TRTLLM_EXAMPLES_DIR", str(s.examples))
    monkeypatch.setenv("SDTK_STANDIN_LOG", str(s.log))
    monkeypatch.setattr(compat, "installed_trtllm_version", lambda: s.version)
    return s


def quiet(msg: str) -> None:
    """A progress callback that prints nothing."""
