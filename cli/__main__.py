"""`python -m cli ...` runs the `silt` command (tests start `silt agent` this way)."""

from cli.main import main

main()
