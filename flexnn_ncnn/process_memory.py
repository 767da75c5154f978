"""A process's resident memory as Linux reports it: /proc/PID/status lines and VmHWM's reset.

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
