"""The compiled hot loops (fileformat/_native.c), or one line saying how to build them.

`make` and `pip install` build the extension; a checkout used straight from source
(PYTHONPATH) needs `python setup.py build_ext --inplace` once and after each change of
the C source, which the ABI check below catches when a contract changed.
"""

from __future__ import annotations

from fileformat.errors import NativeBuildError

ABI = 4

try:
    from fileformat import _native
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    raise NativeBuildError("fileformat._native is not built: run `make` (or `python setup.py"
                           " build_ext --inplace` in a source checkout)") from exc

if _native.ABI != ABI:  # pragma: no cover
    raise NativeBuildError(f"fileformat._native is a stale build (ABI {_native.ABI}, need {ABI}):"
                           " run `make` (or `python setup.py build_ext --inplace`)")

__all__ = ["ABI", "_native"]
