"""`python -m cudal2`: the `cudal2` command, as `python -m cudal2.cli`."""

from .cli import main

main()
