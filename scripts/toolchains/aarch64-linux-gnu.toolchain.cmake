# Cross build for 64-bit ARM Linux with Debian's g++-aarch64-linux-gnu.
# Binaries run here under `qemu-aarch64 -L /usr/aarch64-linux-gnu`, and on a board as they are.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# ncnn's own install prefix lives outside the sysroot
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
