"""Triton's startup error messages, pulled out of real tritonserver 2.51 logs."""

from __future__ import annotations

from toolkit.server.logscan import startup_errors, tail

BAD_MODEL_LOG = r"""I1202 12:28:18.199559 6722 model_lifecycle.cc:472] "loading: ensemble:1"
[libprotobuf ERROR /tmp/tritonbuild/.../text_format.cc:337] Error parsing text-format inference.ModelConfig: 3:17: Expected integer, got: $
E1202 12:28:18.199018 6722 model_repository_manager.cc:1460] "Poll failed for model directory 'broken_cfg': failed to read text proto from /tmp/proto_bad/broken_cfg/config.pbtxt"
I1202 12:28:19.618465 6722 pb_stub.cc:366] "Failed to initialize Python stub: TritonModelException: fake_llm: engine file not found: /x.engine\n\nAt:\n  /tmp/proto_bad/ensemble/1/model.py(33): initialize\n"
E1202 12:28:19.861702 6722 model_lifecycle.cc:642] "failed to load 'ensemble' version 1: Internal: TritonModelException: fake_llm: engine file not found: /x.engine\n\nAt:\n  /tmp/proto_bad/ensemble/1/model.py(33): initialize\n"
I1202 12:28:19.861728 6722 model_lifecycle.cc:777] "failed to load 'ensemble'"
+----------+---------+---------------------------------------------------------------------------+
| Model    | Version | Status                                                                    |
+----------+---------+---------------------------------------------------------------------------+
| ensemble | 1       | UNAVAILABLE: Internal: TritonModelException: fake_llm: engine file not found: /x.engine |
+----------+---------+---------------------------------------------------------------------------+
error: creating server: Internal - failed to load all models
"""

PORT_LOG = """E1202 12:28:31.010635 6823 main.cc:245] "failed to start GRPC service: Unavailable - Socket '127.0.0.1:18001' already in use "
"""


def test_model_load_errors():
    errs = startup_errors(BAD_MODEL_LOG)
    assert errs == [
        "Error parsing text-format inference.ModelConfig: 3:17: Expected integer, got: $",
        "Poll failed for model directory 'broken_cfg': failed to read text proto from "
        "/tmp/proto_bad/broken_cfg/config.pbtxt",
        "failed to load 'ensemble' version 1: Internal: TritonModelException: fake_llm: "
        "engine file not found: /x.engine",
        "error: creating server: Internal - failed to load all models",
    ]


def test_unavailable_row_kept_when_alone():
    row = "| tensorrt_llm | 1       | UNAVAILABLE: Invalid argument: unable to find backend |"
    assert startup_errors(row) == ["tensorrt_llm | 1 | UNAVAILABLE: Invalid argument: unable to find backend"]


def test_port_conflict():
    assert startup_errors(PORT_LOG) == [
        "failed to start GRPC service: Unavailable - Socket '127.0.0.1:18001' already in use"
    ]


def test_tail(tmp_path):
    p = tmp_path / "log"
    p.write_text("".join(f"line {i}\n" for i in range(200)))
    t = tail(p, 50).splitlines()
    assert len(t) == 50 and t[0] == "line 150" and t[-1] == "line 199"
    assert tail(tmp_path / "missing") == ""
