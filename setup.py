"""The compiled parts of siltstream (everything else is configured in pyproject.toml).

`pip install` (and `make`, via `python setup.py build_ext --inplace`) builds them with the
machine's C compiler; nothing else here is compiled.
"""

from setuptools import Extension, setup

_FLAGS = ["-O3", "-std=c11", "-Wall", "-Wextra"]

setup(
    ext_modules=[
        # Kafka record-batch hot loops: record boundary walk and survivor copy (compaction),
        # record encoding and CRC32C (produce).
        Extension("fileformat._native", ["fileformat/_native.c"], extra_compile_args=_FLAGS),
        # Pass 1's offset map (key hash -> latest position), bounded by the memory budget.
        Extension("compactor._offsetmap", ["compactor/_offsetmap.c"], extra_compile_args=_FLAGS),
    ],
)
