"""The compiled hot loops (fileformat/_native.c), or one line saying how to build them.

`make` and `pip install` build the extension; a checkout used straight from source
(PYTHONPATH) needs `python setup.py build_ext --inplace` once and after each change of
the C source, which the ABI check below catches when a contract changed.
"""

from __future__ import annotations

import importlib

from fileformat.errors import NativeBuildError

ABI = 6
_BUILD = "run `make` (or `python setup.py build_ext --inplace` in a source checkout)"


def check_built(module: str, abi: int) -> None:
    """Import the compiled extension `module` (fileformat._native, compactor._offsetmap), or
    raise a one-line NativeBuildError saying how to build it; a build whose ABI is not
    `abi` (its C source changed since) is refused the same way."""
    try:
        built = importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised only on a broken install
        raise NativeBuildError(f"{module} is not built: {_BUILD}") from exc
    if abi != built.ABI:  # pragma: no cover
        raise NativeBuildError(f"{module} is a stale build (ABI {built.ABI}, need {abi}): {_BUILD}")


check_built("fileformat._native", ABI)
import fileformat._native as _native  # noqa: E402  (checked just above)

__all__ = ["ABI", "_native", "check_built"]
