"""toolkit.gpus: one nvidia-smi query, parsed once, for doctor and preflight."""

from __future__ import annotations

from toolkit.gpus import Gpu, GpuQuery, parse


def test_parse_real_nvidia_smi_lines():
    # As printed by `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits`.
    out = "NVIDIA H200, 143771\nNVIDIA A100-SXM4-80GB, 81920\n\n"
    assert parse(out) == [Gpu(0, "NVIDIA H200", 143771), Gpu(1, "NVIDIA A100-SXM4-80GB", 81920)]
    assert parse("No devices were found\n") == []


def test_visible_follows_cuda_visible_devices(monkeypatch):
    q = GpuQuery(True, [Gpu(0, "a", 1), Gpu(1, "b", 2), Gpu(2, "c", 3)])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0,7")
    assert [g.name for g in q.visible()] == ["c", "a"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-uuid")
    assert len(q.visible()) == 3
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert len(q.visible()) == 3
