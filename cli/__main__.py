"""`python -m cli ...` runs the `silt` command (tests start `silt agent` this way)."""

from cli.entry import main

main()
