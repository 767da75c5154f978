"""The code input sections of a GNU ld link map (`-Wl,-Map=FILE`): where each function of each object
landed in the linked file's `.text`.

A map lists every input section under its output section, the name on a line of its own when it is
long:

     .text._ZN4ncnn11Convolution7forwardE...
                    0x0000000000123440      0x1a4 /path/libncnn.a(convolution.cpp.o)
     .text          0x0000000000125000      0x9c0 CMakeFiles/_native.dir/python/module.cpp.o
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

_NAME_ONLY = re.compile(r"^ (\.\S+)\s*$")
_PLACED = re.compile(r"^ (?:(\.\S+))?\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(\S.*)$")
_MEMBER = re.compile(r"^(?P<archive>.*)\((?P<member>[^()]+)\)$")


@dataclass(frozen=True)
class InputSection:
    address: int  # in the linked file (a shared object's addresses are its file's virtual addresses)
    size: int
    name: str  # `.text.<symbol>` with -ffunction-sections, else `.text`
    member: str  # the object's name (an archive member's name, without the archive)
    archive: str  # the archive's file name (`libncnn.a`), "" for an object linked directly


def text_sections(map_path: Path) -> list[InputSection]:
    """The non-empty input sections of the output section `.text`, by address."""
    lines = map_path.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(".text ")), None)
    if start is None:
        raise ValueError(f"{map_path} has no .text output section")
    sections: list[InputSection] = []
    pending: str | None = None
    for line in lines[start + 1:]:
        if line and not line[0].isspace():  # the next output section
            break
        named = _NAME_ONLY.match(line)
        if named:
            pending = named.group(1)
            continue
        placed = _PLACED.match(line)
        if placed is None:
            continue
        name = placed.group(1) or pending
        pending = None
        size = int(placed.group(3), 16)
        if name is None or size == 0:
            continue
        origin = placed.group(4).strip()
        member = _MEMBER.search(origin)
        sections.append(InputSection(int(placed.group(2), 16), size, name,
                                     member["member"] if member else Path(origin).name,
                                     Path(member["archive"]).name if member else ""))
    return sorted(sections, key=lambda s: s.address)


def sections_on_pages(sections: list[InputSection], pages: list[int], page_size: int = 4096) -> list[InputSection]:
    """The sections (of text_sections()) that share a byte with any page starting at an address in `pages`."""
    hit: dict[InputSection, None] = {}
    i = 0
    for page in sorted(pages):
        while i < len(sections) and sections[i].address + sections[i].size <= page:
            i += 1
        j = i
        while j < len(sections) and sections[j].address < page + page_size:
            hit[sections[j]] = None
            j += 1
    return list(hit)
