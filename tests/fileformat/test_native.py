"""The compiled module is built and matches the sources' ABI (a stale build is refused)."""

from __future__ import annotations

import fileformat.native as native
from fileformat import _native


def test_native_module_is_built_with_the_current_abi() -> None:
    assert _native.ABI == native.ABI
