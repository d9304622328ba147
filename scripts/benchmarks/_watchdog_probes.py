#!/usr/bin/env python
"""The watchdog's fault probes of `scripts/bench.py run stress_served --faults`, on detached tiny-baseline
deployments driven through real `sdtk` processes (the helpers of tests/watchdog_support.py,
which tests/server/test_watchdog_faults.py uses too):

- the `tensorrt_llm` stub SIGSTOPped for 30 s mid-stream;
- six kills in a row, each right after READY (short backoff: 1 s doubling to 8 s, cap 5);
- garbage in state.json while serving, then `sdtk stop`;
- a port held during a restart, then freed; the disk full during a restart, then freed (a
  64 MiB tmpfs workdir: root only).

Each row as stress_served.py's fault table has it (fault, expected, observed, detect_s,
recover_s) plus `verdict`: pass or FAIL against the numbers of the fault's "Done when".

    .venv/bin/python scripts/benchmarks/_watchdog_probes.py        # print the rows only
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import watchdog_support as ws  # noqa: E402 - tests/watchdog_support.py

RELAUNCH_S = 150  # the longest wait for one relaunch (a loaded 2-core machine: up to ~85 s seen)


def _verdict(ok: bool) -> str:
    return "pass" if ok else "FAIL"


def _short(text: str, n: int = 160) -> str:
    return " ".join(str(text).split())[:n].replace("|", "\\|")


def frozen(workdir: Path) -> dict:
    from toolkit.server import procs

    dep = ws.deploy(workdir)
    with ws.stopped_at_the_end(dep):
        st = ws.state(dep)
        before = ws.greedy(st)
        thread, first, events = ws.long_stream(st)
        first.wait(120)
        stub = st["stubs"]["tensorrt_llm"][0]
        os.kill(stub, signal.SIGSTOP)
        t0 = time.monotonic()
        cont = threading.Timer(30, lambda: procs.alive(stub) and os.kill(stub, signal.SIGCONT))
        cont.start()
        try:
            code, report = ws.wait_for(
                lambda: (s := ws.status(dep))[0] != 0 and "frozen" in s[1]["message"] and s, 30, "status"
            )
            t_status = time.monotonic() - t0
            thread.join(60)
            t_stream = events[-1].get("at", time.monotonic()) - t0
            new = ws.wait_for(lambda: ws.ready(dep, 1), RELAUNCH_S, "the restart")
            t_serving = time.monotonic() - t0
            same = ws.greedy(new) == before
        finally:
            cont.cancel()
            if procs.alive(stub):
                os.kill(stub, signal.SIGCONT)
    named = "'tensorrt_llm'" in report["message"] and str(stub) in report["message"]
    last = events[-1].get("exception") or events[-1].get("end") or "still running"
    error = "exception" in events[-1] or any("error" in e for e in events[:-1])
    ok = t_status < 10 and named and t_stream < 15 and error and t_serving < 30 and same
    return dict(
        fault="`tensorrt_llm` stub SIGSTOPped for 30 s mid-stream (detached, watchdog on)",
        expected="status non-zero naming the frozen stub within 10 s; the stream ends with an error "
        "within 15 s; serving again within 30 s of the freeze, same greedy output",
        observed=f"status exit {code} after {t_status:.1f}s: {_short(report['message'], 110)}; stream ended "
        f"after {t_stream:.1f}s ({_short(last, 80)}, after {len(events) - 1} events); READY again after "
        f"{t_serving:.1f}s; greedy output {'identical' if same else 'DIFFERENT'}",
        detect_s=round(t_status, 1),
        recover_s=round(t_serving, 1),
        verdict=_verdict(ok)
        + ("" if t_serving < 30 else f" (serving again after {t_serving:.0f}s, over 30 s)"),
    )


def crash_loop(workdir: Path, kills: int = 6) -> dict:
    from toolkit.server import procs

    env = dict(SDTK_RESTART_LIMIT=str(kills - 1), SDTK_RESTART_BACKOFF_S="1", SDTK_RESTART_BACKOFF_MAX_S="8")
    dep = ws.deploy(workdir, **env)
    with ws.stopped_at_the_end(dep):
        pids, back = [], []
        kill = 0.0
        for n in range(kills):
            st = ws.wait_for(lambda n=n: ws.ready(dep, n), RELAUNCH_S, f"READY #{n}")
            if n:
                back.append(time.monotonic() - kill)
            pids.append(st["pid"])
            os.kill(st["stubs"]["tensorrt_llm"][0], signal.SIGKILL)
            kill = time.monotonic()
        ws.wait_for(lambda: ws.state(dep)["status"] == "crash-loop", 60, "the crash loop")
        t_loop = time.monotonic() - kill
        code, report = ws.status(dep)
        log = (dep / "logs" / "watchdog.log").read_text()
        delays = [float(x) for x in re.findall(r"restarting in (\d+(?:\.\d+)?)s", log)]
        kept = [(dep / "logs" / f"tritonserver.{pid}.log").is_file() for pid in pids]
        left = procs.group_members(ws.state(dep)["pgid"]) or procs.alive(ws.state(dep)["watchdog_pid"])
    msg = report["message"]
    growing = len(delays) >= 2 and all(a < b for a, b in zip(delays, delays[1:], strict=False))
    shown = "first failure: " in msg and "last failure: " in msg and f"tritonserver.{pids[0]}.log" in msg
    ok = code != 0 and report["state"] == "crash-loop" and growing and shown and kept[0] and kept[-1]
    ok = ok and len(back) == kills - 1 and not left
    return dict(
        fault=f"{kills} kills of the `tensorrt_llm` stub in a row, each right after READY "
        f"(SDTK_RESTART_LIMIT={kills - 1}, SDTK_RESTART_BACKOFF_S=1, SDTK_RESTART_BACKOFF_MAX_S=8)",
        expected="growing gaps between restarts; stops at the cap; status shows crash-loop with the first "
        "and the last failure; both their logs kept",
        observed=f"restarts 1-{len(back)} READY {', '.join(f'{b:.1f}' for b in back)}s after each kill, "
        f"backoff before them {', '.join(f'{d:g}' for d in [0.0, *delays])}s; kill {kills}: crash-loop after {t_loop:.1f}s, "
        f"no restart; status exit {code} ({report['state']}): {_short(msg, 150)}; logs kept: "
        f"{sum(kept)} of {kills} (first {'yes' if kept[0] else 'NO'}, last {'yes' if kept[-1] else 'NO'}); "
        f"processes left: {'yes' if left else 'none'}",
        detect_s=round(t_loop, 1),
        recover_s=None,
        verdict=_verdict(ok),
    )


def damaged_record(workdir: Path) -> dict:
    from toolkit.server import procs

    dep = ws.deploy(workdir)
    with ws.stopped_at_the_end(dep):
        st = ws.state(dep)
        (dep / "state.json").write_text("{not json")
        t0 = time.monotonic()
        code, report = ws.status(dep)
        t_status = time.monotonic() - t0
        named = report.get("pid") == st["pid"]
        fixed = ws.wait_for(
            lambda: ws.state(dep)["pid"] == st["pid"] and ws.state(dep), 30, "the record rewritten"
        )
        t_fixed = time.monotonic() - t0
        watching = fixed["watchdog_pid"] == st["watchdog_pid"] and procs.alive(st["watchdog_pid"])
        (dep / "state.json").write_text("{not json")
        r = ws.sdtk("stop", "--workdir", str(dep))
        stopped = r.returncode == 0 and f"pid {st['pid']}" in r.stdout
        left = procs.group_members(st["pgid"]) or procs.alive(st["watchdog_pid"])
    ok = named and watching and stopped and not left
    return dict(
        fault="garbage in `state.json` while serving (watchdog on), then `sdtk stop` (garbage again)",
        expected="status names the running server; `sdtk stop` stops it; no process left; the watchdog "
        "keeps watching",
        observed=f"status exit {code} ({report.get('state')}) names pid {report.get('pid')} "
        f"({'the server' if named else 'NOT the server'}); the watchdog rewrote the record after "
        f"{t_fixed:.1f}s and kept watching: {watching}; `sdtk stop` exit {r.returncode}: "
        f"{_short(r.stdout or r.stderr, 90)}; processes left: {'yes' if left else 'none'}",
        detect_s=round(t_status, 1),
        recover_s=round(t_fixed, 1),
        verdict=_verdict(ok),
    )


def port_and_disk(workdir: Path, hold_s: float = 10.0) -> list[dict]:
    """A port held during a restart, then the disk full during the next: two rows, one deployment
    on a 64 MiB tmpfs."""
    disk = workdir / "disk"
    if why := ws.mount_tmpfs(disk):
        skipped = f"not run: cannot mount a tmpfs ({why})"
        return [dict(fault=f, expected="", observed=skipped, detect_s=None, recover_s=None, verdict="not run")
                for f in ("a port held during a restart", "disk full during a restart")]  # fmt: skip
    try:
        return _port_and_disk(disk, hold_s)
    finally:
        ws.umount(disk)


def _failing_for(dep: Path, hold_s: float, what: str) -> tuple[int, dict, float]:
    """Wait until `status` says the relaunches fail, then until `hold_s` passed: its exit code,
    its report and the seconds until it said so."""
    t0 = time.monotonic()
    code, report = ws.wait_for(lambda: ws.failing_restart(dep), 60, what)
    seen = time.monotonic() - t0
    time.sleep(max(0.0, hold_s - seen))
    return code, report, seen


def _back(dep: Path, restarts: int, before: str) -> tuple[dict, float, bool]:
    """Wait for READY after restart `restarts`: the record, the seconds, the same greedy output."""
    t0 = time.monotonic()
    new = ws.wait_for(lambda: ws.ready(dep, restarts), RELAUNCH_S, f"restart {restarts} READY")
    return new, time.monotonic() - t0, ws.greedy(new) == before


def _port_and_disk(disk: Path, hold_s: float) -> list[dict]:
    from toolkit.server import procs

    dep = ws.deploy(disk, SDTK_RESTART_BACKOFF_S="1", SDTK_RESTART_BACKOFF_MAX_S="2")
    rows = []
    with ws.stopped_at_the_end(dep):
        st = ws.state(dep)
        before = ws.greedy(st)
        dog = st["watchdog_pid"]
        os.kill(dog, signal.SIGSTOP)  # so that the port is taken before it relaunches
        procs.kill_group_now(st["pgid"])
        held = socket.socket()
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ws.wait_for(
            lambda: held.bind(("127.0.0.1", st["http_port"])) or True, 10, "the port freed by the kill"
        )
        held.listen()
        os.kill(dog, signal.SIGCONT)
        try:
            code, report, t_seen = _failing_for(dep, hold_s, "a failed restart")
        finally:
            held.close()
        new, t_back, same = _back(dep, 1, before)
        why = str(st["http_port"]) in report["message"] and "in use" in report["message"]
        rows.append(dict(
            fault=f"http port held by another process during a restart for {hold_s:.0f} s, then freed",
            expected="serving again without a human; meanwhile status non-zero saying why",
            observed=f"status exit {code} ({report['state']}) after {t_seen:.1f}s: {_short(report['message'], 120)}; "
            f"port freed: READY again after {t_back:.1f}s, greedy output {'identical' if same else 'DIFFERENT'}",
            detect_s=round(t_seen, 1), recover_s=round(t_back, 1),
            verdict=_verdict(code != 0 and why and same),
        ))  # fmt: skip

        filler = disk / "filler"
        ws.fill(filler)
        os.kill(new["stubs"]["tensorrt_llm"][0], signal.SIGKILL)
        try:
            code, report, t_seen = _failing_for(dep, hold_s, "a restart failing on the full disk")
            survived = procs.alive(dog)
        finally:
            filler.unlink()
        _, t_back, same = _back(dep, 2, before)
        fine = procs.alive(dog) and ws.status(dep)[0] == 0
        why = "No space left on device" in report["message"]
        rows.append(dict(
            fault=f"disk full (64 MiB tmpfs workdir) during a restart for {hold_s:.0f} s, then space freed",
            expected="the watchdog survives; status says what failed; recovers once space is freed",
            observed=f"status exit {code} ({report['state']}) after {t_seen:.1f}s: {_short(report['message'], 120)}; "
            f"watchdog alive while full: {survived}; space freed: READY again after {t_back:.1f}s, greedy "
            f"output {'identical' if same else 'DIFFERENT'}, status exit 0 and watchdog alive: {fine}",
            detect_s=round(t_seen, 1), recover_s=round(t_back, 1),
            verdict=_verdict(code != 0 and why and survived and same and fine),
        ))  # fmt: skip
    return rows


def _failed(fault: str, e: BaseException) -> dict:
    return dict(fault=fault, expected="", observed=f"the probe failed: {_short(repr(e), 200)}",
                detect_s=None, recover_s=None, verdict="FAIL")  # fmt: skip


def run(workdir: Path) -> list[dict]:
    """Every probe on its own tiny-baseline deployment under `workdir`; a probe that raises is a
    FAIL row (its deployment stopped), and the next probe runs."""
    rows: list[dict] = []
    for i, probe in enumerate((frozen, crash_loop, damaged_record, port_and_disk)):
        try:
            got = probe(workdir / f"{i}-{probe.__name__}")
        except Exception as e:  # noqa: BLE001 - one broken probe must not hide the others
            got = _failed(probe.__name__, e)
        for r in got if isinstance(got, list) else [got]:
            rows.append(r)
            print(json.dumps(r), flush=True)
    return rows


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sdtk-watchdog-probes-") as tmp:
        run(Path(tmp))
