"""`python -m reference --write`: regenerate docs/'s reference sections (settings, served
APIs) from the declarations; `--check`: exit 1 if any differs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import stale, write


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference", description=__doc__)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="rewrite the generated sections")
    group.add_argument("--check", action="store_true", help="exit 1 if a section is stale")
    args = parser.parse_args(argv)
    if args.write:
        for page in write():
            print(f"rewrote {page}")
        return 0
    drifted = stale()
    for where in drifted:
        print(f"stale: {where} (run python -m reference --write)", file=sys.stderr)
    return 1 if drifted else 0


if __name__ == "__main__":
    sys.exit(main())
