#include "runtime/heap_policy.h"

#include <cstdlib> // defines __GLIBC__ where glibc is the C library
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace flexnn {

void fix_malloc_thresholds()
{
#if defined(__GLIBC__)
    // glibc's defaults; setting either turns its dynamic adjustment off
    const int kThreshold = 128 * 1024;
    mallopt(M_MMAP_THRESHOLD, kThreshold);
    mallopt(M_TRIM_THRESHOLD, kThreshold);
#endif
}

} // namespace flexnn
