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
    // one heap for all threads: the loading thread's layer objects (freed by the computing thread)
    // would otherwise fill an arena of its own that no other thread's free space can serve
    mallopt(M_ARENA_MAX, 1);
#endif
}

} // namespace flexnn
