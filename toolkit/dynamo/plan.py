"""A Dynamo deployment's processes: the frontend and N workers, as argv lists and environment.

Facts (ai-dynamo 1.6.1 wheel; ai-dynamo/dynamo):
- frontend: `python -m dynamo.frontend --http-host H --http-port P --discovery-backend file
  --request-plane tcp --event-plane zmq --router-mode M` (`dynamo/frontend/frontend_args.py`
  513-551; router modes `dynamo/common/configuration/groups/router_args.py` 226-245);
- file discovery: its store directory is `DYN_FILE_KV`; the TCP request plane advertises
  `DYN_TCP_RPC_HOST`, the ZMQ event plane `DYN_EVENT_PLANE_HOST`;
- the frontend caches model cards under `$HOME/.cache/dynamo`: every process gets a HOME (and
  XDG/HF caches) inside the deployment directory;
- TensorRT-LLM workers: `python -m dynamo.trtllm --model M --served-model-name N
  --extra-engine-args FILE.yaml` (`dynamo/trtllm/backend_args.py` 44-56, 164-170), the LLM-API
  YAML sdtk renders for the llmapi backend (toolkit.build.llmapi), `speculative_config` included.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, get_args

from toolkit.errors import UsageError, did_you_mean
from toolkit.recipe import DynamoRouterMode

ROUTER_MODES: tuple[str, ...] = get_args(DynamoRouterMode)  # serving.dynamo.router_mode
DEFAULT_ROUTER_MODE = "round-robin"
SUBDIR = "dynamo"  # <deployment>/dynamo: plan.json, processes.json, home/, discovery/
PLAN_FILE = "plan.json"
PROCESSES_FILE = "processes.json"
NAMESPACE = "sdtk"
WORKER_MODULE = "toolkit.dynamo.worker"
SUPERVISOR_MODULE = "toolkit.dynamo.supervisor"
TEMPLATE = Path(__file__).with_name("plain_chat_template.jinja")
LOOPBACK = "127.0.0.1"
# What Dynamo 1.6.1 may bind beyond the addresses sdtk gives it: `sdtk status` lists every listener of
# the deployment off loopback (none with this environment on the machine it was measured on).
NOT_LOOPBACK = (
    "every listener is asked for on 127.0.0.1; `sdtk status` names any the deployment opens elsewhere "
    "(the ZMQ event plane has been seen binding 0.0.0.0 while advertising 127.0.0.1)"
)


@dataclass
class Proc:
    """One process of the deployment."""

    name: str  # frontend | worker-<i>
    argv: list[str]
    env: dict[str, str]
    log: str  # its log file
    metrics_url: str = ""  # worker: sdtk_spec_* on 127.0.0.1

    def line(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (env + " " if env else "") + shlex.join(self.argv)


@dataclass(frozen=True)
class DynamoPorts:
    """The frontend's HTTP port and one metrics port per worker: as many workers as ports (only
    the reference workers serve their metrics)."""

    http: int
    worker_metrics: tuple[int, ...]


@dataclass
class DynamoPlan:
    recipe: str
    model: str  # the served model name
    mode: str
    backend: str  # reference (sdtk's worker) | llmapi (dynamo.trtllm)
    root: str  # the deployment directory
    host: str
    http_port: int
    router_mode: str
    frontend: Proc
    workers: list[Proc]
    engine_yaml: str = ""  # llmapi: the --extra-engine-args file
    build_script: str = ""  # --dry-run: the build runbook (the engine YAML among its files)
    notes: list[str] = field(default_factory=list)

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def processes(self) -> list[Proc]:
        return [self.frontend, *self.workers]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DynamoPlan:
        data = dict(data)
        data["frontend"] = Proc(**data["frontend"])
        data["workers"] = [Proc(**w) for w in data["workers"]]
        return cls(**data)

    def script(self) -> str:
        """--dry-run: the runbook (the build, then every process's command)."""
        lines = [self.build_script.rstrip("\n"), ""] if self.build_script else []
        lines += [
            f"# --- Dynamo: frontend + {len(self.workers)} {self.backend} worker(s), router {self.router_mode}; "
            f"model '{self.model}' ({self.mode}) at {self.http_url}/v1",
            *(f"# {n}" for n in self.notes),
            f"# {self.frontend.name}",
            self.frontend.line() + " &",
        ]
        for w in self.workers:
            lines += [
                f"# {w.name}" + (f" (sdtk_spec_* at {w.metrics_url})" if w.metrics_url else ""),
                w.line() + " &",
            ]
        lines.append("wait")
        return "\n".join(lines) + "\n"


def router_mode_of(recipe: Any, mode: str | None) -> str:
    """The router: --router-mode when given, else the recipe's serving.dynamo.router_mode."""
    if mode is None:
        return str(recipe.serving.dynamo.router_mode)
    if mode not in ROUTER_MODES:
        guess = did_you_mean(mode, list(ROUTER_MODES))
        raise UsageError(
            f"--router-mode must be one of {', '.join(ROUTER_MODES)}, not '{mode}'"
            + (f"; did you mean '{guess}'?" if guess else "")
        )
    return mode


def environment(root: Path) -> dict[str, str]:
    """What every process of the deployment gets on top of the caller's environment: discovery,
    planes and caches inside the deployment directory, everything advertised on loopback."""
    base = root / SUBDIR
    return {
        "HOME": str(base / "home"),
        "XDG_CACHE_HOME": str(base / "home" / ".cache"),
        "DYN_DISCOVERY_BACKEND": "file",
        "DYN_FILE_KV": str(base / "discovery"),
        "DYN_REQUEST_PLANE": "tcp",
        "DYN_EVENT_PLANE": "zmq",
        "DYN_TCP_RPC_HOST": LOOPBACK,
        "DYN_EVENT_PLANE_HOST": LOOPBACK,
        # The frontend's TCP response-stream server otherwise listens on the host's interface
        # address (seen: 192.0.2.2), and the system status server's host is 0.0.0.0 (port off).
        "DYN_TCP_RESPONSE_STREAM_HOST": LOOPBACK,
        "DYN_SYSTEM_HOST": LOOPBACK,
        "DYN_LOG": "info",
    }


def plan_dynamo(
    recipe: Any,
    root: Path,
    *,
    backend: str,
    engine_dir: Path,
    model_path: Path | str,
    ports: DynamoPorts,
    router_mode: str | None = None,
    python: str = sys.executable,
) -> DynamoPlan:
    """The frontend and workers of `recipe`'s deployment in `root`, one worker per metrics port;
    the router is `router_mode`, or the recipe's (serving.dynamo.router_mode) when None. With
    `kv`, every worker publishes KV events (sdtk's: `--publish-kv-events`, toolkit.dynamo.kvevents;
    `dynamo.trtllm --publish-kv-events`, `dynamo/trtllm/backend_args.py` 179-190)."""
    http_port, worker_metrics_ports = ports.http, ports.worker_metrics
    workers = len(worker_metrics_ports)
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, not {workers}")
    router_mode = router_mode_of(recipe, router_mode)
    env = environment(root)
    logs = root / "logs"
    # The served name: serving.model_name when the recipe sets it, else the recipe's name (the
    # Triton default, `ensemble`, names a model of the repository, not what an OpenAI client asks for).
    name = (
        recipe.serving.model_name if "model_name" in recipe.serving.model_fields_set else recipe.display_name
    )
    frontend = Proc(
        "frontend",
        [
            python,
            "-m",
            "dynamo.frontend",
            "--http-host",
            LOOPBACK,
            "--http-port",
            str(http_port),
            "--discovery-backend",
            "file",
            "--request-plane",
            "tcp",
            "--event-plane",
            "zmq",
            "--router-mode",
            router_mode,
            "--namespace",
            NAMESPACE,
        ],
        env,
        str(logs / "dynamo-frontend.log"),
    )
    procs = []
    engine_yaml = ""
    for i in range(workers):
        wname = f"worker-{i}"
        if backend == "reference":
            port = worker_metrics_ports[i]
            argv = _reference_argv(python, recipe, engine_dir, model_path, name, wname, port)
            metrics = f"http://{LOOPBACK}:{port}/metrics"
        else:
            engine_yaml = str(engine_dir / "extra_llm_api_options.yaml")
            argv = [
                python,
                "-m",
                "dynamo.trtllm",
                "--model",
                str(model_path),
                "--served-model-name",
                name,
                "--extra-engine-args",
                engine_yaml,
                "--namespace",
                NAMESPACE,
            ]
            metrics = ""
        if router_mode == "kv":
            argv.append("--publish-kv-events")
        procs.append(Proc(wname, argv, env, str(logs / f"dynamo-{wname}.log"), metrics))
    notes = [f"caches and file discovery under {root / SUBDIR}; {NOT_LOOPBACK}"]
    if backend != "reference":
        notes.append(
            "dynamo.trtllm exports no acceptance metric (dynamo/trtllm/metrics.py 17-32); sdtk's "
            "sdtk_spec_* come from its reference workers only"
        )
    return DynamoPlan(
        recipe=str(recipe.source_path) if recipe.source_path else recipe.display_name,
        model=name,
        mode=recipe.mode,
        backend=backend,
        root=str(root),
        host=LOOPBACK,
        http_port=http_port,
        router_mode=router_mode,
        frontend=frontend,
        workers=procs,
        engine_yaml=engine_yaml,
        notes=notes,
    )


def _reference_argv(
    python: str, recipe: Any, engine_dir: Path, model_path: Path | str, name: str, wname: str, port: int
) -> list[str]:
    """sdtk's reference worker (toolkit.dynamo.worker) serving `engine_dir` as `name`."""
    argv = [
        python,
        "-m",
        WORKER_MODULE,
        "--engine-dir",
        str(engine_dir),
        "--model-path",
        str(model_path),
        "--served-model-name",
        name,
        "--namespace",
        NAMESPACE,
        "--worker-name",
        wname,
        "--max-batch-size",
        str(recipe.build.max_batch_size),
        "--max-seq-len",
        str(recipe.build.max_seq_len),
        "--metrics-port",
        str(port),
    ]
    if not recipe.serving.add_special_tokens:
        argv.append("--no-add-special-tokens")
    if not _has_chat_template(Path(model_path)):
        argv += ["--chat-template", str(TEMPLATE)]
    return argv


def _has_chat_template(model_path: Path) -> bool:
    """The frontend refuses a model whose tokenizer_config.json has no chat_template
    ("prompt_formatter_from_mdc: chat_template field is required"): sdtk then registers its plain one."""
    import json

    cfg = model_path / "tokenizer_config.json"
    try:
        return (
            bool(json.loads(cfg.read_text()).get("chat_template"))
            or (model_path / "chat_template.jinja").is_file()
        )
    except (OSError, ValueError):
        return False
