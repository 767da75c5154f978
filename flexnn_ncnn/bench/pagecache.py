"""Page cache held for one file: evict it (fadvise DONTNEED) and count its resident pages (mincore).

Memory (c) of DESIGN.md §4 without privileges: the harness evicts the weight file before a child
starts and samples how much of it the kernel caches while the child runs. Only clean pages are
evicted, so the file is fsync'ed first.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

import numpy as np

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_MAP_FAILED = ctypes.c_void_p(-1).value


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_bytes(path: Path) -> int:
    """Bytes of `path` in the page cache now (whole pages)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr == _MAP_FAILED:
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            pages = np.zeros((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE, np.uint8)
            if _libc.mincore(addr, size, pages.ctypes.data) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return int(np.count_nonzero(pages & 1)) * mmap.PAGESIZE
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)
