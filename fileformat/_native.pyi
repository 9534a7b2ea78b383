"""Type stubs of the compiled module (fileformat/_native.c)."""

ABI: int
