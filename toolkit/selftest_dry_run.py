"""The old home of `sdtk selftest --dry-run`, kept for its importers: see toolkit.selftest.dry_run."""

from toolkit.selftest.dry_run import DryRun, PathCheck, PlanRow, dry_run

__all__ = ["DryRun", "PathCheck", "PlanRow", "dry_run"]
