"""A process's resident memory as Linux reports it: /proc/PID/status lines, VmHWM's reset and the
resident bytes of each mapping (/proc/PID/smaps).

Memory (b) of DESIGN.md §4 is the peak RSS of the inference process (VmHWM) minus its RSS before the
model is loaded; resetting VmHWM to the current RSS (clear_refs 5) first makes the peak the model's.
"""

from __future__ import annotations

import ctypes
from pathlib import Path


def status_bytes(field: str, pid: int | str = "self") -> int:
    """A `VmRSS`/`VmHWM` line of /proc/PID/status in bytes; 0 once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def reset_peak_rss() -> bool:
    """Restart VmHWM from the current RSS (Linux clear_refs 5); False where the kernel refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def release_free_heap() -> None:
    """Return the C heap's free pages to the OS (glibc's malloc_trim; nothing elsewhere), so that the
    RSS read next holds no freed page a later allocation could reuse without growing it."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # the process's own C library
    if trim is not None:
        trim(0)


def resident_by_mapping() -> dict[str, int]:
    """This process's resident bytes per mapping (/proc/self/smaps `Rss`), summed by what is mapped: a
    file's name (`_native.cpython-311-x86_64-linux-gnu.so`), `[heap]` (the C heap), `[stack]`, or
    `[anon]` for every anonymous mapping (the arena, Python's allocator, thread stacks)."""
    totals: dict[str, int] = {}
    name = "[anon]"
    with open("/proc/self/smaps") as smaps:  # a line at a time: reading it must not grow what it measures
        for line in smaps:
            fields = line.split()
            if fields and "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's header line
                name = Path(fields[5]).name if len(fields) > 5 and fields[5].startswith("/") else (fields[5] if len(fields) > 5 else "[anon]")
            elif fields and fields[0] == "Rss:":
                totals[name] = totals.get(name, 0) + int(fields[1]) * 1024
    return totals
