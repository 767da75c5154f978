"""Atomic output (temporary files beside the targets, then `os.replace` each into place), the .npz
writer that copies no array, and the sampled digest that identifies a large model file without
reading it whole."""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from pathlib import Path
from typing import BinaryIO, Callable, Mapping

import numpy as np

Writer = Callable[[BinaryIO], object]


def atomic_write_all(outputs: Mapping[str | Path, Writer]) -> None:
    """Create or replace every path with what its writer puts in a binary file.

    All files are written before any is replaced, so a failure while writing leaves every path as
    it was, and no temporary file behind.
    """
    umask = os.umask(0)
    os.umask(umask)
    temps: dict[Path, str] = {}
    try:
        for path, write in outputs.items():
            path = Path(path)
            fd, temps[path] = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())  # the data is on disk before a rename can expose it
            os.chmod(temps[path], 0o666 & ~umask)  # mkstemp's 0600 is not what a plain open() gives
        for path, tmp in temps.items():
            os.replace(tmp, path)
    finally:
        for tmp in temps.values():
            if os.path.exists(tmp):
                os.unlink(tmp)


def atomic_write(path: str | Path, write: Writer) -> None:
    atomic_write_all({path: write})


NPZ_SLICE_BYTES = 1 << 20


def write_npz(f: BinaryIO, arrays: Mapping[str, np.ndarray]) -> None:
    """What `np.savez(f, **arrays)` writes, without its copy of each array: savez hands a zip entry
    up to 16 MB of an array at a time as a new bytes object, which an inference process under a
    budget cannot afford for a large output. Each array's bytes go out in slices of
    NPZ_SLICE_BYTES read in place."""
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            array = np.asarray(array)
            if not array.flags.c_contiguous:
                array = array.copy(order="C")
            with archive.open(f"{name}.npy", "w", force_zip64=True) as entry:
                np.lib.format.write_array_header_1_0(entry, np.lib.format.header_data_from_array_1_0(array))
                data = memoryview(array.reshape(-1)).cast("B")
                for start in range(0, len(data), NPZ_SLICE_BYTES):
                    entry.write(data[start:start + NPZ_SLICE_BYTES])


DIGEST_BLOCKS = 32  # blocks of DIGEST_BLOCK_BYTES, evenly spaced from the first byte to the last
DIGEST_BLOCK_BYTES = 1 << 16


def sampled_digest(path: str | Path) -> str:
    """"SIZE:SHA256" over the file's size and DIGEST_BLOCKS blocks spread over it (all of a file of at
    most DIGEST_BLOCKS blocks): another model, another seed's weights or a truncated copy differ in
    milliseconds, where a whole hash reads every byte into the page cache (and a plan's weights are
    streamed to stay out of memory). An edit between the blocks is not seen."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        h.update(size.to_bytes(8, "little"))
        last = max(0, size - DIGEST_BLOCK_BYTES)
        starts = sorted({last * i // (DIGEST_BLOCKS - 1) for i in range(DIGEST_BLOCKS)})
        for start in starts:
            h.update(os.pread(f.fileno(), DIGEST_BLOCK_BYTES, start))
    return f"{size}:{h.hexdigest()}"
