"""toolkit.checks: one status vocabulary and one renderer for doctor, health, validate, preflight."""

from __future__ import annotations

import io
import json

from toolkit import checks, doctor, validate
from toolkit.build import preflight
from toolkit.checks import FAILED, PASSED, SKIPPED, WARNING, Check, CheckReport, Status
from toolkit.ops import health


def test_one_status_vocabulary():
    assert [s.value for s in Status] == ["passed", "warning", "skipped", "failed"]
    assert (preflight.PASSED, preflight.FAILED, preflight.SKIPPED) == (PASSED, FAILED, SKIPPED)
    assert (health.OK, health.WARN, health.FAIL, health.SKIP) == (PASSED, WARNING, FAILED, SKIPPED)
    assert preflight.CheckResult is Check and validate.Check is Check
    assert isinstance(doctor.run_doctor().checks[0], Check)
    assert f"{FAILED}: x" == "failed: x" and json.dumps({"s": WARNING}) == '{"s": "warning"}'


def test_report_fails_only_on_failed():
    r = CheckReport([Check("a", "passed"), Check("b", WARNING, "slow"), Check("c", SKIPPED)])
    assert r.ok and r.failed == [] and r.check("b").detail == "slow"
    r.checks.append(Check("d", FAILED, "broken", "fix it", value="0"))
    assert not r.ok and [c.name for c in r.failed] == ["d"]
    assert r.to_dict()["checks"][-1] == {
        "name": "d",
        "status": "failed",
        "ok": False,
        "value": "0",
        "detail": "broken",
        "hint": "fix it",
    }


def test_one_table_renderer():
    out = io.StringIO()
    checks.print_table("t", [Check("gpus", FAILED, "nvidia-smi not found", value="none")], file=out)
    text = out.getvalue()
    assert "gpus" in text and "failed" in text and "none" in text and "value" in text
    out = io.StringIO()
    checks.print_table(None, [Check("grpc", PASSED, "3 generations")], file=out)
    assert "value" not in out.getvalue() and "3 generations" in out.getvalue()
