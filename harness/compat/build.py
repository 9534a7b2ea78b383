"""librdkafka's source unpacked and built once, its test-runner reused while the source is the
same: `./configure && make libs && make -C tests build`, as librdkafka's tests/README.md says.

The build lives in `build/compat/` of the checkout (ignored by git; `SILT_COMPAT_BUILD_DIR`
moves it). A lock file serialises builders (`make compat` and `make test` in one checkout);
the source is unpacked into a temporary directory renamed into place, so an interrupted
unpack leaves nothing half-written; the stamp (the tarball's SHA-256) is written last, so an
interrupted build is finished by the next caller (make resumes where it stopped).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.agent_process import REPO

VERSION = "2.15.0"
TARBALL = f"librdkafka-{VERSION}.tar.gz"
# Where the pinned source is looked for: `SILT_COMPAT_TARBALL`, else `../shared/peer/` beside
# the checkout (the project's layout), else the machine's shared directory.
PEER_DIRS = (REPO.parent / "shared" / "peer", Path("/work/shared/peer"))
# Debian packages the build needs (rapidjson: without it 0053 and 0110 skip themselves).
DEBIAN_PACKAGES = ("build-essential", "libssl-dev", "libsasl2-dev", "libzstd-dev",
                   "liblz4-dev", "zlib1g-dev", "rapidjson-dev")
STAMP = ".silt-built"


class BuildError(RuntimeError):
    """librdkafka's source did not build (the message has the build log's tail)."""


class SourceMissing(BuildError):
    """The pinned source archive is not where it is looked for."""


def tarball() -> Path:
    """The pinned librdkafka source archive."""
    env = os.environ.get("SILT_COMPAT_TARBALL")
    candidates = [Path(env)] if env else list(dict.fromkeys(d / TARBALL for d in PEER_DIRS))
    for path in candidates:
        if path.is_file():
            return path
    raise SourceMissing(f"not found: {', '.join(map(str, candidates))}"
                        " (SILT_COMPAT_TARBALL names another)")


def build_root() -> Path:
    """The directory holding the unpacked source and the build log."""
    return Path(os.environ.get("SILT_COMPAT_BUILD_DIR", REPO / "build" / "compat"))


def source_dir() -> Path:
    return build_root() / f"librdkafka-{VERSION}"


def tests_dir() -> Path:
    """librdkafka's tests/ directory: the test-runner and test.c."""
    return source_dir() / "tests"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def is_built() -> bool:
    """Whether a finished build of the pinned source is in place."""
    stamp = source_dir() / STAMP
    try:
        return stamp.read_text().split()[0] == sha256(tarball())
    except (OSError, IndexError):
        return False


def ensure_built(say: Callable[[str], None] = print) -> Path:
    """The tests/ directory of a finished build, building first if needed (minutes on two
    cores; reused afterwards). Raises BuildError."""
    source = tarball()
    root = build_root()
    with _locked(root):
        if is_built():
            return tests_dir()
        digest = sha256(source)
        if not source_dir().is_dir():
            tmp = root / f".unpack-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            with tarfile.open(source) as tar:
                tar.extractall(tmp, filter="tar")
            (tmp / source_dir().name).rename(source_dir())
            shutil.rmtree(tmp)
        jobs = str(os.cpu_count() or 2)
        log_path = root / "build.log"
        started = time.monotonic()
        say(f"building librdkafka {VERSION} in {source_dir()} (log: {log_path})")
        with log_path.open("w") as log:
            for step in (["./configure"], ["make", f"-j{jobs}", "libs"],
                         ["make", f"-j{jobs}", "-C", "tests", "build"]):
                done = subprocess.run(step, cwd=source_dir(), stdout=log,
                                      stderr=subprocess.STDOUT, check=False)
                if done.returncode:
                    tail = log_path.read_text(errors="replace").splitlines()[-30:]
                    raise BuildError(f"{' '.join(step)} exited {done.returncode}:\n"
                                     + "\n".join(tail))
        seconds = time.monotonic() - started
        (source_dir() / STAMP).write_text(f"{digest} {seconds:.0f}\n")
        say(f"built in {seconds:.0f} s")
        return tests_dir()


def main() -> int:
    """`python -m harness.compat.build` (make compat-build): build, or say why not. A missing
    source is an error only where tests must not skip (SILT_REQUIRE_SERVERS, as in CI)."""
    try:
        ensure_built()
    except SourceMissing as e:
        required = os.environ.get("SILT_REQUIRE_SERVERS", "").lower() in ("1", "true", "yes")
        print(f"librdkafka's test-runner not built: {e}"
              + ("" if required else " (its tests skip)"))
        return 1 if required else 0
    except BuildError as e:
        print(f"librdkafka's test-runner did not build: {e}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
