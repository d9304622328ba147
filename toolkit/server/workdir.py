"""Where a deployment lives: `<workdir>/<recipe name>/`, with the model repository in
`triton_repo/`. The one definition of both names (deploy, Kubernetes, Slurm and the server
state read them)."""

from __future__ import annotations

from pathlib import Path

DEFAULT_WORKDIR = Path("workdir")  # --workdir's default
REPO_SUBDIR = "triton_repo"  # <workdir>/<recipe>/triton_repo: what `sdtk deploy --render-only` writes
