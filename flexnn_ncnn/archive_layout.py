"""NCNN's static library with its objects grouped by instruction set, so the code a CPU runs lies close.

NCNN compiles every layer once per instruction set it dispatches to at run time (x86:
`convolution_x86.cpp.o`, `convolution_x86_avx512.cpp.o`, `_fma`, `_avx`, ...; ARM: `_arm82`,
`_arm86sve`, ...) and archives them layer by layer, so the variants one CPU runs lie between variants
it never runs. The kernel maps the 64 KB around each first call of a function (fault-around), so how
far apart the functions a process runs lie decides its resident code, which counts in the memory a
budget holds (docs/RUNTIME.md, memory beside the arena). Re-archiving the same objects with the
portable ones first, then every instruction set's variants together, moves only where the code lies
(ResNet-152's resident runtime code: 2.88 -> 2.49 MB). The order within a group is NCNN's.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

log = logging.getLogger(__name__)

# `<layer>_<arch>[_<isa>].cpp.o`: the architecture's base variant, or one compiled for an extension
_VARIANT = re.compile(r"_(?P<arch>x86|arm|mips|loongarch|riscv)(?P<isa>_[a-z0-9]+)?\.cpp\.o$")


def isa_group(member: str) -> str:
    """"" for a portable object, the architecture (`x86`) for a base variant, `x86_avx512` for an extension's."""
    m = _VARIANT.search(member)
    if m is None:
        return ""
    return m["arch"] + (m["isa"] or "")


def grouped(members: Sequence[str]) -> list[str]:
    """`members` with portable objects first, then each group of isa_group in order of name (a base
    variant before its extensions), each keeping its members' order."""
    position = {name: i for i, name in enumerate(members)}
    return sorted(members, key=lambda name: (isa_group(name), position[name]))


def group_by_isa(archive: Path, ar: str) -> bool:
    """Re-archive `archive` in grouped() order with the toolchain's `ar`; its modification time is
    kept, so CMake's install and the links depending on it see the library they built. Returns
    whether the order changed."""
    members = subprocess.run([ar, "t", str(archive)], capture_output=True, text=True, check=True).stdout.split()
    order = grouped(members)
    if order == members:
        return False
    if len(set(members)) != len(members):  # extracting would overwrite one object with another
        log.warning("%s holds two objects of one name: left in NCNN's order", archive)
        return False
    stat = archive.stat()
    with tempfile.TemporaryDirectory(dir=archive.parent, prefix=".regroup-") as tmp:
        subprocess.run([ar, "x", str(archive)], cwd=tmp, check=True)
        regrouped = Path(tmp) / archive.name
        subprocess.run([ar, "rcs", str(regrouped), *order], cwd=tmp, check=True)
        os.utime(regrouped, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        os.replace(regrouped, archive)
    return True
