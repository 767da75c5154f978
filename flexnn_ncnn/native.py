"""The native module (`flexnn_ncnn._native`), checked against this checkout before use.

It is built by `python -m flexnn_ncnn.build --target host` from the patched NCNN; a module built
from another patch series or NCNN version than this checkout pins is refused, naming the field.
"""

from __future__ import annotations

import functools
from types import ModuleType

from . import fetch, patches
from .cli import UserError

REBUILD = "python -m flexnn_ncnn.build --target host"


@functools.cache
def load() -> ModuleType:
    try:
        from . import _native
    except ImportError as e:
        raise UserError(f"the native module is not built ({e}): run `{REBUILD}`") from None
    info = _native.build_info()
    expected = {
        "patch_series_id": patches.series_id(patches.read_series()),
        "ncnn_version": fetch.Lock.load().ncnn_version,
    }
    for name, want in expected.items():
        if info[name] != want:
            raise UserError(f"the native module was built with {name} {info[name]}, this checkout has {want}: run `{REBUILD}`")
    return _native
