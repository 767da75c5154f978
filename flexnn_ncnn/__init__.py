"""flexnn_ncnn: memory-budgeted DNN inference on edge CPUs (FlexNN, MobiCom 2024) on Tencent NCNN."""

__version__ = "0.1.0"
