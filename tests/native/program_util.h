#ifndef FLEXNN_TESTS_NATIVE_PROGRAM_UTIL_H
#define FLEXNN_TESTS_NATIVE_PROGRAM_UTIL_H

// What the C++ test programs share: their error line and the bitwise comparison of outputs.

#include "mat.h"

#include <cstdio>
#include <cstring>
#include <string>

namespace flexnn_test {

// one "error: ..." line on stderr; the program's exit code
inline int fail(const std::string& message)
{
    fprintf(stderr, "error: %s\n", message.c_str());
    return 1;
}

// the same shape, element size and bytes (channel padding excluded)
inline bool same(const ncnn::Mat& a, const ncnn::Mat& b)
{
    if (a.w != b.w || a.h != b.h || a.d != b.d || a.c != b.c || a.elemsize != b.elemsize)
        return false;
    for (int q = 0; q < a.c; q++)
        if (memcmp(a.channel(q), b.channel(q), (size_t)a.w * a.h * a.d * a.elemsize) != 0)
            return false;
    return true;
}

} // namespace flexnn_test

#endif // FLEXNN_TESTS_NATIVE_PROGRAM_UTIL_H
