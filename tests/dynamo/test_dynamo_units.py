"""The parts of the Dynamo target that run without ai-dynamo: the processes' commands and
environment, the supervisor (with stand-in child processes), the OpenAI client's stream parsing,
status's /proc address reading, and the worker's token handling. The real deployment is
tests/dynamo/test_dynamo_deploy.py."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from toolkit import runner
from toolkit.client.errors import ClientError
from toolkit.client.openai_api import _events
from toolkit.dynamo import plan as dplan
from toolkit.dynamo.status import _hex_addr, listeners
from toolkit.errors import UsageError
from toolkit.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "tiny-eagle3.yaml"


def _plan(tmp_path: Path, workers: int = 2, router: str = "round-robin") -> dplan.DynamoPlan:
    recipe = load_recipe(str(RECIPE))
    return dplan.plan_dynamo(
        recipe,
        tmp_path / "tiny-eagle3",
        backend="reference",
        engine_dir=tmp_path / "engines" / "target",
        model_path=ROOT / "models" / "tiny" / "target",
        ports=dplan.DynamoPorts(8123, (9001, 9002, 9003)[:workers]),
        router_mode=router,
        python="python3",
    )


def test_frontend_and_worker_commands(tmp_path):
    p = _plan(tmp_path)
    assert p.frontend.argv == [
        "python3", "-m", "dynamo.frontend", "--http-host", "127.0.0.1", "--http-port", "8123",
        "--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq",
        "--router-mode", "round-robin", "--namespace", "sdtk",
    ]  # fmt: skip
    assert [w.name for w in p.workers] == ["worker-0", "worker-1"]
    w1 = p.workers[1].argv
    assert w1[:3] == ["python3", "-m", "toolkit.dynamo.worker"]
    assert w1[w1.index("--metrics-port") + 1] == "9002"
    assert w1[w1.index("--served-model-name") + 1] == "tiny-eagle3"  # the recipe's name, not 'ensemble'
    # The tiny tokenizer has no chat template: the frontend would refuse the model without one.
    assert w1[w1.index("--chat-template") + 1] == str(dplan.TEMPLATE)
    assert p.workers[1].metrics_url == "http://127.0.0.1:9002/metrics"
    env = p.frontend.env
    assert env["HOME"].startswith(str(tmp_path / "tiny-eagle3" / "dynamo"))
    assert env["DYN_FILE_KV"] == str(tmp_path / "tiny-eagle3" / "dynamo" / "discovery")
    for key in (
        "DYN_TCP_RPC_HOST",
        "DYN_EVENT_PLANE_HOST",
        "DYN_TCP_RESPONSE_STREAM_HOST",
        "DYN_SYSTEM_HOST",
    ):
        assert env[key] == "127.0.0.1"


def test_plan_round_trips_and_prints_every_command(tmp_path):
    p = _plan(tmp_path, workers=3)
    again = dplan.DynamoPlan.from_dict(json.loads(json.dumps(p.to_dict())))
    assert again == p
    script = p.script()
    for proc in p.processes:
        assert proc.line() + " &" in script
    assert script.endswith("wait\n")


def test_trtllm_workers_take_the_llmapi_yaml(tmp_path):
    recipe = load_recipe(str(RECIPE))
    p = dplan.plan_dynamo(
        recipe,
        tmp_path,
        backend="llmapi",
        engine_dir=tmp_path / "engines" / "target",
        model_path="/models/target",
        ports=dplan.DynamoPorts(8000, (0,)),
        python="python3",
    )
    yaml_path = str(tmp_path / "engines" / "target" / "extra_llm_api_options.yaml")
    # ai-dynamo 1.6.1 dynamo/trtllm/backend_args.py 44-56 (--model, --served-model-name), 164-170
    # (--extra-engine-args).
    assert p.workers[0].argv == [
        "python3", "-m", "dynamo.trtllm", "--model", "/models/target", "--served-model-name", "tiny-eagle3",
        "--extra-engine-args", yaml_path, "--namespace", "sdtk",
    ]  # fmt: skip
    assert p.engine_yaml == yaml_path


@pytest.mark.parametrize(
    ("mode", "says"),
    [("round_robin", "did you mean 'round-robin'"), ("fastest", "must be one of")],
)
def test_router_mode_refused(tmp_path, mode, says):
    with pytest.raises(UsageError, match=says):
        _plan(tmp_path, router=mode)


def test_the_recipes_router_mode_reaches_the_frontend_the_workers_and_the_dgd(tmp_path):
    """serving.dynamo.router_mode: a closed field (did-you-mean), the frontend's --router-mode
    unless the CLI's flag overrides it; with kv every worker publishes KV events (sdtk's worker
    --publish-kv-events; dynamo.trtllm --publish-kv-events, ai-dynamo 1.6.1
    dynamo/trtllm/backend_args.py 179-190)."""
    from toolkit.dynamo.k8s import plan_dgd
    from toolkit.errors import RecipeError
    from toolkit.recipe import parse_recipe

    data = {"models": {"target": "meta-llama/Llama-3.1-8B-Instruct"}, "backend": "llmapi"}
    with pytest.raises(
        RecipeError, match=r"serving\.dynamo\.router_mode: 'round_robin' .*did you mean 'round-robin'"
    ):
        parse_recipe({**data, "serving": {"dynamo": {"router_mode": "round_robin"}}})
    with pytest.raises(RecipeError, match=r"serving\.dynamo\.router: .*"):
        parse_recipe({**data, "serving": {"dynamo": {"router": "kv"}}})
    kv = parse_recipe({**data, "serving": {"dynamo": {"router_mode": "kv"}}})
    assert parse_recipe(data).serving.dynamo.router_mode == "round-robin"

    recipe = load_recipe(str(RECIPE), overrides=["serving.dynamo.router_mode=kv"])
    args = dict(
        backend="reference", engine_dir=tmp_path / "e", model_path=ROOT / "models" / "tiny" / "target"
    )
    p = dplan.plan_dynamo(recipe, tmp_path, **args, ports=dplan.DynamoPorts(1, (2, 3)))
    fe = p.frontend.argv
    assert fe[fe.index("--router-mode") + 1] == "kv" and p.router_mode == "kv"
    assert all("--publish-kv-events" in w.argv for w in p.workers)
    p = dplan.plan_dynamo(recipe, tmp_path, **args, ports=dplan.DynamoPorts(1, (2,)), router_mode="random")
    assert p.router_mode == "random" and "--publish-kv-events" not in p.workers[0].argv

    dgd = plan_dgd(kv)
    assert dgd.commands["frontend"][-2:] == ["--router-mode", "kv"]
    assert dgd.commands["worker"][-1] == "--publish-kv-events"
    assert plan_dgd(kv, router_mode="least-loaded").commands["frontend"][-1] == "least-loaded"


class _Recorder:
    """Records KvBlocks' events as Dynamo's KvEventPublisher and WorkerMetricsPublisher receive
    them (the argument names of ai-dynamo 1.6.1 dynamo/_core.pyi)."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def publish_stored(self, token_ids, num_block_tokens, block_hashes, parent_hash):
        self.events.append(
            ("stored", list(token_ids), list(num_block_tokens), list(block_hashes), parent_hash)
        )

    def publish_removed(self, block_hashes):
        self.events.append(("removed", list(block_hashes)))

    def publish(self, dp_rank, active_decode_blocks, kv_used_blocks):
        self.events.append(("load", kv_used_blocks))


def test_kv_events_store_a_live_requests_full_blocks_once_and_remove_them_when_it_ends():
    from toolkit.dynamo.kvevents import KvBlocks

    pub, load = _Recorder(), _Recorder()
    kv = KvBlocks(pub, 4, load)
    a = kv.acquire(list(range(10)))  # two full blocks; the last 2 tokens are no block
    assert pub.events == [("stored", list(range(8)), [4, 4], [1, 2], None)]
    b = kv.acquire([*range(8), 50, 51, 52, 53, 54])  # shares both blocks, adds one
    assert pub.events[-1] == ("stored", [50, 51, 52, 53], [4], [3], 2)
    c = kv.acquire([0, 1, 2])  # no full block: nothing to store
    assert len(pub.events) == 2 and kv.used == 3
    kv.release(a)  # b still holds the shared blocks
    assert len(pub.events) == 2
    kv.release(b)
    assert pub.events[-1] == ("removed", [3, 2, 1])  # leaves first
    kv.release(c)
    assert kv.used == 0 and [e[1] for e in load.events] == [2, 3, 3, 3, 0, 0]
    kv.acquire(list(range(4)))  # a block stored again gets a new id
    assert pub.events[-1] == ("stored", [0, 1, 2, 3], [4], [4], None)


def test_workers_must_be_positive(tmp_path):
    with pytest.raises(UsageError, match="at least 1"):
        _plan(tmp_path, workers=0)


def _wait(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_supervisor_restarts_a_dead_process_and_stops_its_group(tmp_path):
    """Stand-in children (python sleeping) instead of Dynamo's processes: what is under test is
    the supervisor's own behaviour."""
    root = tmp_path / "dep"
    (root / "dynamo").mkdir(parents=True)
    p = _plan(tmp_path, workers=1)
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    p.frontend.argv, p.workers[0].argv = list(sleeper), list(sleeper)
    p.frontend.log, p.workers[0].log = str(root / "logs" / "f.log"), str(root / "logs" / "w.log")
    (root / "dynamo" / dplan.PLAN_FILE).write_text(json.dumps(p.to_dict()))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    sup = runner.spawn(
        [sys.executable, "-m", dplan.SUPERVISOR_MODULE, str(root)], log_path=root / "logs" / "s.log", env=env
    )
    record = root / "dynamo" / dplan.PROCESSES_FILE

    def procs() -> dict:
        try:
            return json.loads(record.read_text())
        except (OSError, ValueError):
            return {}

    try:
        _wait(lambda: len([n for n, v in procs().items() if v["alive"]]) == 2)
        first = procs()["worker-0"]["pid"]
        assert os.getpgid(first) == sup.pid  # in the supervisor's group: `sdtk stop` kills it with it
        os.kill(first, signal.SIGKILL)
        _wait(lambda: procs()["worker-0"]["restarts"] == 1 and procs()["worker-0"]["pid"] != first)
        assert "exited -9" in procs()["worker-0"]["failures"][-1]
        pids = [v["pid"] for v in procs().values()]
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(timeout=20) == 0
        for pid in pids:
            _wait(lambda pid=pid: not Path(f"/proc/{pid}").exists() or _zombie(pid))
    finally:
        runner.kill_pgroup(sup.pid)
        sup.wait()


def test_status_and_stop_name_the_supervisor_frontend_and_workers(tmp_path):
    """Stand-in children again: `sdtk status` of a deployment whose supervisor was SIGKILLed names
    what it left running, and `sdtk stop` (stop_dynamo) kills those and says what it stopped,
    not 'tritonserver'."""
    from toolkit.dynamo.launch import _record
    from toolkit.dynamo.status import dynamo_status, stop_dynamo

    root = tmp_path / "dep"
    (root / "dynamo").mkdir(parents=True)
    p = _plan(tmp_path, workers=2)
    # kill_orphans touches only processes whose command names a Dynamo module
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)  # dynamo stand-in"]
    for i, proc in enumerate(p.processes):
        proc.argv, proc.log = list(sleeper), str(root / "logs" / f"{i}.log")
    (root / "dynamo" / dplan.PLAN_FILE).write_text(json.dumps(p.to_dict()))
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def start() -> tuple[Any, dict[str, int]]:
        sup = runner.spawn(
            [sys.executable, "-m", dplan.SUPERVISOR_MODULE, str(root)],
            log_path=root / "logs" / "s.log",
            env=env,
        )
        _record(p, root, sup.pid, "ready", True)
        record = root / "dynamo" / dplan.PROCESSES_FILE
        _wait(
            lambda: record.is_file() and sum(v["alive"] for v in json.loads(record.read_text()).values()) == 3
        )
        return sup, {n: v["pid"] for n, v in json.loads(record.read_text()).items()}

    sup, pids = start()
    try:
        res = stop_dynamo(root, grace=10)
        assert sup.wait(timeout=20) == 0
        named = ", ".join(f"{n} (pid {pids[n]})" for n in ("frontend", "worker-0", "worker-1"))
        assert res.message == f"stopped the Dynamo supervisor (pid {sup.pid}) with {named}"
        assert "tritonserver" not in res.message and not (root / "state.json").exists()
        for pid in pids.values():
            _wait(lambda pid=pid: not Path(f"/proc/{pid}").exists() or _zombie(pid))

        sup, pids = start()
        os.kill(sup.pid, signal.SIGKILL)
        sup.wait()
        st = dynamo_status(root)
        assert st.state == "dead", st.message
        assert f"the Dynamo supervisor recorded with pid {sup.pid} is gone" in st.message
        assert "left running: " + ", ".join(f"{n} pid {pids[n]}" for n in pids) in st.message
        res = stop_dynamo(root, grace=10)
        assert res.message.startswith(f"the Dynamo supervisor (pid {sup.pid}) was not running;"), res.message
        assert "killed 3 process(es) its dead supervisor left" in res.message
        for pid in pids.values():
            _wait(lambda pid=pid: not Path(f"/proc/{pid}").exists() or _zombie(pid))
    finally:
        runner.kill_pgroup(sup.pid)
        sup.wait()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_sse_events():
    lines = iter(
        [
            ": comment",
            'data: {"choices": [{"text": "a"}]}',
            "",
            'data: {"choices": [{"text": "b", "finish_reason": "length"}]}',
            "data: [DONE]",
            'data: {"choices": [{"text": "never"}]}',
        ]
    )
    assert [e["choices"][0]["text"] for e in _events(lines)] == ["a", "b"]
    with pytest.raises(ClientError, match="error in stream"):
        list(_events(iter(['data: {"error": "boom"}'])))


def test_proc_net_addresses():
    assert _hex_addr("0100007F:1F90") == "127.0.0.1:8080"
    assert _hex_addr("00000000:0050") == "0.0.0.0:80"
    assert _hex_addr("00000000000000000000000001000000:0050") == "::1:80"


def test_listeners_of_this_process():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert f"127.0.0.1:{port}" in listeners([os.getpid()]).get(os.getpid(), [])


def test_special_prefix_and_finish_reason():
    from transformers import AutoTokenizer

    from toolkit.dynamo.worker import finish_reason, special_prefix

    tok = AutoTokenizer.from_pretrained(str(ROOT / "models" / "tiny" / "target"))
    assert special_prefix(tok) == [tok.bos_token_id]
    assert (finish_reason("eos", False), finish_reason("length", False), finish_reason("eos", True)) == (
        "stop",
        "length",
        "cancelled",
    )
