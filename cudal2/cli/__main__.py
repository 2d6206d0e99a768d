"""`python -m cudal2.cli`: the `cudal2` command."""

from . import main

main()
