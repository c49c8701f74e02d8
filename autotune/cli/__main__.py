"""`python -m autotune.cli ...`: the same as the `autotune` console script."""

from autotune.cli import main

main()
