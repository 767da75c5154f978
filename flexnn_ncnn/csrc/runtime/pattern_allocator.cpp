#include "runtime/pattern_allocator.h"

#include <algorithm>
#include <cstdint>

namespace flexnn {

void* PatternAllocator::fastMalloc(size_t size)
{
    // the shadow before, the buffer and its shadow after (fastMalloc's alignment and over-read slack
    // come on top); a size no shadows fit around fails, as NCNN's own allocation of it would
    static_assert(kLeadBytes % NCNN_MALLOC_ALIGN == 0, "the buffer keeps fastMalloc's alignment");
    const size_t shadow = std::min(size, kShadowBytes) + kShadowSlackBytes;
    if (size > SIZE_MAX - kLeadBytes - shadow - sizeof(uint32_t))
        return nullptr;
    const size_t bytes = (kLeadBytes + size + shadow + sizeof(uint32_t) - 1) / sizeof(uint32_t) * sizeof(uint32_t);
    void* block = ncnn::fastMalloc(bytes);
    if (!block)
        return nullptr;
    uint32_t* words = (uint32_t*)block;
    for (size_t i = 0; i < bytes / sizeof(uint32_t); i++)
        words[i] = pattern_;
    return (unsigned char*)block + kLeadBytes;
}

void PatternAllocator::fastFree(void* ptr)
{
    if (ptr)
        ncnn::fastFree((unsigned char*)ptr - kLeadBytes);
}

} // namespace flexnn
