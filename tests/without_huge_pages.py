"""Run a command with transparent huge pages off for it and its children (PR_SET_THP_DISABLE survives
exec): `python without_huge_pages.py PROGRAM ARGS...`.

qemu-aarch64 asks for huge pages on its translated-code buffer, so whether the host had a free 2 MB
page decides its resident memory, which flexnn-bench measures as what the process holds beyond the
runtime's count: under THP that varied by 2.2 MB from one process to the next, without it by 70 KB."""

import ctypes
import os
import sys

PR_SET_THP_DISABLE = 41

if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0:
    sys.exit(f"error: prctl(PR_SET_THP_DISABLE): {os.strerror(ctypes.get_errno())}")
os.execvp(sys.argv[1], sys.argv[1:])
