"""`python -m tests.fileformat.golden --write`: regenerate the golden files (on purpose only)."""

from __future__ import annotations

import argparse

from . import EXPECTED, OBJECT, regenerate


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fileformat.golden",
                                     description=__doc__)
    parser.add_argument("--write", action="store_true", required=True,
                        help="overwrite the golden object and its JSON")
    parser.parse_args()
    regenerate()
    print(f"wrote {OBJECT} and {EXPECTED}: review the diff")


if __name__ == "__main__":
    main()
