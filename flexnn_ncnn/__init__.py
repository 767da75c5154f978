"""flexnn_ncnn: memory-budgeted DNN inference on edge CPUs (FlexNN, MobiCom 2024) on Tencent NCNN."""

from __future__ import annotations

from typing import Any

__version__ = "0.2.0"

__all__ = ["Session"]


def __getattr__(name: str) -> Any:
    # the runtime needs the native module: import it only when asked for
    if name == "Session":
        from .session import Session
        return Session
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
