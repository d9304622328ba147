"""`python -m toolkit.cli` (and `torchrun ... -m toolkit.cli`): the `sdtk` command."""

from toolkit.cli import main

main()
