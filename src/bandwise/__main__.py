"""`python -m bandwise ...` — the entry point torchrun uses (`torchrun -m bandwise train`)."""

from bandwise.cli.main import main

main()
