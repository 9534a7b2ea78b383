"""The `silt` executable's entry point (and `python -m cli`'s).

kio, the Kafka protocol codec, imports hypothesis when it is installed (the dev extra) to
register strategies for its types, and hypothesis then keeps a `.hypothesis/` directory in
the working directory: a read-only command must create nothing where the user runs it. The
product never uses hypothesis, so the command runs with it marked unimportable; code that
imports `cli.main` itself (the tests) is unaffected.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Run the `silt` command with hypothesis kept out of the process."""
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    from cli.main import main as silt

    silt()
