"""``release_freed_memory``: a large block freed goes back to the system (issue 41)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

CHILD = """
import sys
if sys.argv[1] == "fixed":
    from analysis._cli import release_freed_memory
    assert release_freed_memory()
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
MB = 1024 * 1024
first = bytearray(16 * MB)
del first  # by default, glibc now serves blocks up to 16 MiB from its heap
before = rss()
blocks = [bytearray(16 * MB) for _ in range(4)]  # 64 MiB, like the columns of a table
pin = bytearray(200 * 1024)  # a block after them keeps the heap from shrinking at its end
del blocks
print(rss() - before)
"""


def _held_mb(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="mallopt(M_MMAP_THRESHOLD) is glibc's",
)
def test_a_freed_block_is_returned_only_with_the_threshold_fixed() -> None:
    assert _held_mb("default") >= 60  # glibc kept the freed blocks' 64 MiB
    assert _held_mb("fixed") < 8  # mapped and unmapped on its own
