"""NCNN's static library laid out so the code a CPU runs lies close: objects grouped by instruction
set, and the functions models run (the hot list, measured by code_trace.py) ahead of all others.

The kernel maps the 64 KB around each first call of a function (fault-around), so how far apart the
functions a process runs lie decides its resident code, which counts in the memory a budget holds
(docs/RUNTIME.md, memory beside the arena). Two layouts, both moving code only:

- NCNN compiles every layer once per instruction set it dispatches to at run time (x86:
  `convolution_x86.cpp.o`, `convolution_x86_avx512.cpp.o`, `_fma`, ...; ARM: `_arm82`, ...) and
  archives them layer by layer. Re-archived with the portable objects first, then every instruction
  set's variants together, the variants one CPU runs lie between each other only.
- NCNN is compiled with -ffunction-sections (build.py), so every function is a section of its own.
  A hot function's section is renamed `.text.sorted.<group>.<rank>.<name>`: the linkers' default scripts
  place those first in `.text`, sorted by name, so the hot functions of one instruction set lie
  together, in the hot list's order, whatever object they come from.

The hot list names functions of one instruction set's variant as measured; `generic()` writes the
extension out of them (`convolution_x86{isa}.cpp.o`, `_ZN4ncnn{Convolution_x86}...`) so they apply to
the same functions of every other variant.

The hot list is measured on a third copy (`page_aligned()`): every function section aligned to a
page, so each page of that build's code holds one function and the pages a model runs name exactly
the functions it ran (code_trace.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Sequence

log = logging.getLogger(__name__)

# `<layer>_<arch>[_<isa>].cpp.o`: the architecture's base variant, or one compiled for an extension
_VARIANT = re.compile(r"_(?P<arch>x86|arm|mips|loongarch|riscv)(?P<isa>_[a-z0-9]+)?\.cpp\.o$")
# a length-prefixed identifier of a mangled name: `22Convolution_x86_avx512`
_LENGTH = re.compile(r"(?<![0-9])([1-9][0-9]*)")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
ISA = "{isa}"
SORTED = ".text.sorted."
PAGE = 4096  # the code tracer's unit: what the MMU maps and protects

# a hot function: (member, section), generic() over instruction sets
HotEntry = tuple[str, str]


def isa_group(member: str) -> str:
    """"" for a portable object, the architecture (`x86`) for a base variant, `x86_avx512` for an extension's."""
    m = _VARIANT.search(member)
    if m is None:
        return ""
    return m["arch"] + (m["isa"] or "")


def _isa_suffix(member: str) -> str:
    m = _VARIANT.search(member)
    return (m["isa"] or "") if m else ""


def grouped(members: Sequence[str]) -> list[str]:
    """`members` with portable objects first, then each group of isa_group in order of name (a base
    variant before its extensions), each keeping its members' order."""
    position = {name: i for i, name in enumerate(members)}
    return sorted(members, key=lambda name: (isa_group(name), position[name]))


def generic(member: str, section: str) -> HotEntry:
    """(member, section) of an extension's variant with its extension written out: the member's
    suffix becomes `{isa}`, every mangled identifier ending in it `{identifier-without-it}`."""
    suffix = _isa_suffix(member)
    if not suffix:
        return member, section
    out, pos = [], 0
    for m in _LENGTH.finditer(section):
        if m.start() < pos:
            continue
        n = int(m.group(1))
        ident = section[m.end():m.end() + n]
        if len(ident) == n and ident.endswith(suffix) and len(ident) > len(suffix):
            out += [section[pos:m.start()], "{", ident[:-len(suffix)], "}"]
            pos = m.end() + n
    out.append(section[pos:])
    return member[:-len(suffix + ".cpp.o")] + ISA + ".cpp.o", "".join(out)


def specific(entry: HotEntry, member: str) -> str | None:
    """The section of `member` that `entry` (generic()) names, or None when it names another object."""
    entry_member, section = entry
    suffix = _isa_suffix(member)
    if entry_member.replace(ISA, suffix) != member:
        return None
    return _PLACEHOLDER.sub(lambda m: f"{len(m.group(1)) + len(suffix)}{m.group(1)}{suffix}", section)


def _variant_key(member: str) -> str:
    """What the variants of one object share: its name without the extension (`convolution_x86.cpp.o`)."""
    suffix = _isa_suffix(member)
    return member[:-len(suffix + ".cpp.o")] + ".cpp.o" if suffix else member


def hot_renames(members: Sequence[str], hot: Sequence[HotEntry]) -> dict[str, dict[str, str]]:
    """For every member holding hot functions: {section: `.text.sorted.<group>.<rank>.<its name>`},
    rank being the function's place in `hot` (its layout order) and group the member's isa_group's place."""
    groups = sorted({isa_group(m) for m in members})
    by_key: dict[str, list[tuple[int, HotEntry]]] = defaultdict(list)
    for rank, entry in enumerate(hot):
        by_key[entry[0].replace(ISA, "")].append((rank, entry))
    renames: dict[str, dict[str, str]] = {}
    for member in members:
        group = groups.index(isa_group(member))
        for rank, entry in by_key.get(_variant_key(member), []):
            section = specific(entry, member)
            if section is not None:
                renames.setdefault(member, {})[section] = f"{SORTED}{group:02d}.{rank:05d}.{section.removeprefix('.text.')}"
    return renames


def original_name(section: str) -> str:
    """The name NCNN's compiler gave a section hot_renames renamed (`.text.sorted.04.00012._ZN4ncnn...`
    -> `.text._ZN4ncnn...`); any other name as it is."""
    if not section.startswith(SORTED):
        return section
    return ".text." + section[len(SORTED):].split(".", 2)[2]


def read_hot_list(path: Path) -> list[HotEntry]:
    """A hot list: `member<TAB>section` lines in layout order; `#` starts a comment line."""
    entries = []
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            member, _, section = line.partition("\t")
            entries.append((member, section))
    return entries


def _stamp(archive: Path, hot: Sequence[HotEntry]) -> str:
    stat = archive.stat()
    return json.dumps({"size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                       "hot": hashlib.sha256(repr(list(hot)).encode()).hexdigest()})


def lay_out(built: Path, installed: Path, ar: str, objcopy: str, hot: Sequence[HotEntry]) -> bool:
    """Write the archive `built` (as its build made it) over its installed copy `installed`, in
    grouped() order with its hot functions' sections renamed (hot_renames), with the toolchain's `ar`
    and `objcopy`. The installed copy's modification time is kept, so CMake's install and the links
    depending on it see the library they built; a stamp beside it skips a copy already laid out.
    Returns whether anything changed."""
    stamp_path = installed.with_name(installed.name + ".layout.json")
    if stamp_path.exists() and stamp_path.read_text() == _stamp(installed, hot):
        return False
    members = subprocess.run([ar, "t", str(built)], capture_output=True, text=True, check=True).stdout.split()
    if len(set(members)) != len(members):  # extracting would overwrite one object with another
        log.warning("%s holds two objects of one name: installed as NCNN built it", built)
        return False
    stat = installed.stat()
    renames = hot_renames(members, hot)
    with tempfile.TemporaryDirectory(dir=installed.parent, prefix=".layout-") as tmp:
        subprocess.run([ar, "x", str(built)], cwd=tmp, check=True)
        for member, sections in renames.items():
            _rename_sections(Path(tmp) / member, objcopy, sections.items())
        laid_out = Path(tmp) / installed.name
        subprocess.run([ar, "rcs", str(laid_out), *grouped(members)], cwd=tmp, check=True)
        os.utime(laid_out, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        os.replace(laid_out, installed)
    stamp_path.write_text(_stamp(installed, hot))
    log.info("%s: %d objects grouped by instruction set, %d hot functions first", installed, len(members),
             sum(len(s) for s in renames.values()))
    return True


def page_aligned(built: Path, out: Path, ar: str, objcopy: str) -> bool:
    """Write the archive `built` to `out` with every code section (`.text*`) aligned to a page: linked,
    no two functions share a page. A stamp beside `out` skips a copy already made from this `built`.
    Returns whether anything changed."""
    stamp_path = out.with_name(out.name + ".aligned.json")
    stat = built.stat()
    stamp = json.dumps({"built": str(built), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "page": PAGE})
    if out.exists() and stamp_path.exists() and stamp_path.read_text() == stamp:
        return False
    members = subprocess.run([ar, "t", str(built)], capture_output=True, text=True, check=True).stdout.split()
    if len(set(members)) != len(members):
        raise ValueError(f"{built} holds two objects of one name: extracting it would lose one")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".aligned-") as tmp:
        subprocess.run([ar, "x", str(built)], cwd=tmp, check=True)
        for member in members:
            subprocess.run([objcopy, "--set-section-alignment", f".text*={PAGE}", member], cwd=tmp, check=True)
        aligned = Path(tmp) / out.name
        subprocess.run([ar, "rcs", str(aligned), *members], cwd=tmp, check=True)
        os.replace(aligned, out)
    stamp_path.write_text(stamp)
    log.info("%s: %d objects, every function on pages of its own", out, len(members))
    return True


def _rename_sections(obj: Path, objcopy: str, renames: Iterable[tuple[str, str]]) -> None:
    args = [a for old, new in renames for a in ("--rename-section", f"{old}={new}")]
    subprocess.run([objcopy, *args, str(obj)], check=True)
