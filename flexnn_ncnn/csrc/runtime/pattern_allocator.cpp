#include "runtime/pattern_allocator.h"

#include <algorithm>
#include <cstdint>

namespace flexnn {

void* PatternAllocator::fastMalloc(size_t size)
{
    // the buffer and its shadow (fastMalloc's alignment and over-read slack come on top); a size
    // no shadow fits after fails, as NCNN's own allocation of it would
    const size_t shadow = std::min(size, kShadowBytes) + kShadowSlackBytes;
    if (size > SIZE_MAX - shadow - sizeof(uint32_t))
        return nullptr;
    const size_t bytes = (size + shadow + sizeof(uint32_t) - 1) / sizeof(uint32_t) * sizeof(uint32_t);
    void* ptr = ncnn::fastMalloc(bytes);
    if (!ptr)
        return nullptr;
    uint32_t* words = (uint32_t*)ptr;
    for (size_t i = 0; i < bytes / sizeof(uint32_t); i++)
        words[i] = pattern_;
    return ptr;
}

void PatternAllocator::fastFree(void* ptr)
{
    ncnn::fastFree(ptr);
}

} // namespace flexnn
