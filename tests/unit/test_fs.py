"""toolkit._fs: the one atomic writer."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from toolkit import _fs
from toolkit._fs import atomic_path, atomic_write


def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "sub" / "out.txt"
    assert atomic_write(target, "one") == target
    atomic_write(target, b"\x00two")
    assert target.read_bytes() == b"\x00two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]


def test_atomic_write_sets_mode(tmp_path):
    p = atomic_write(tmp_path / "run.sbatch", "#!/bin/bash\n", mode=0o755)
    assert stat.S_IMODE(p.stat().st_mode) == 0o755


def test_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        assert tmp.name == "report.json.incomplete"
        raise RuntimeError("killed")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_tmp_name_keeps_the_ending(tmp_path):
    with atomic_path(tmp_path / "plot.png", tmp_name="plot.incomplete.png") as tmp:
        assert tmp.suffix == ".png"
        tmp.write_bytes(b"png")
    assert (tmp_path / "plot.png").read_bytes() == b"png"


def test_publish_dir_swaps_in_the_new_directory_and_keeps_the_old_one_if_the_swap_fails(
    tmp_path, monkeypatch
):
    dest, tmp = tmp_path / "engines", tmp_path / "engines.incomplete"
    dest.mkdir()
    (dest / "old.txt").write_text("old")
    tmp.mkdir()
    (tmp / "new.txt").write_text("new")
    _fs.publish_dir(tmp, dest)
    assert [p.name for p in tmp_path.iterdir()] == ["engines"]  # no aside or temporary left
    assert (dest / "new.txt").read_text() == "new" and not (dest / "old.txt").exists()

    tmp.mkdir()
    real = os.replace

    def failing(src, dst):
        if Path(src) == tmp:
            raise OSError("disk full")
        real(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError, match="disk full"):
        _fs.publish_dir(tmp, dest)
    assert (dest / "new.txt").read_text() == "new"  # the previous directory is back in place
