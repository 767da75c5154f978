#ifndef FLEXNN_PATTERN_ALLOCATOR_H
#define FLEXNN_PATTERN_ALLOCATOR_H

#include <allocator.h>

#include <cstddef>
#include <cstdint>

namespace flexnn {

// A heap allocator whose every buffer, a shadow after it (as many bytes again, at most 1 MiB, and
// 64 KiB) and a shadow before it (64 KiB) hold one 32-bit pattern until written: two runs of the
// same model on allocators of different patterns read the same bytes only where the model computed
// them. A layer that reads past a blob it was given (past NCNN's refcount, which follows the data),
// or before it, reads the pattern, so the two runs' outputs differ whatever the heap held before
// (prepare's reproducibility check, profiler.cpp). Stateless, so thread-safe.
class PatternAllocator : public ncnn::Allocator
{
public:
    explicit PatternAllocator(uint32_t pattern)
        : pattern_(pattern)
    {
    }
    void* fastMalloc(size_t size) override;
    void fastFree(void* ptr) override;

private:
    // beyond the buffer's own size: a layer indexing a small blob as one of another rank reads some
    // KB past it (pnnx's batch-1 einsum export, tests/test_slice.py)
    static constexpr size_t kShadowSlackBytes = 64 * 1024;
    // before the buffer, a multiple of NCNN_MALLOC_ALIGN: a crop from a negative start beyond the
    // axis reads that far before it (pnnx's export of x[..., -40:-2] on a shorter axis, tests/test_slice.py)
    static constexpr size_t kLeadBytes = 64 * 1024;
    // the shadow's share proportional to the buffer, capped: prepare's runs hold at most this more
    // per buffer than NCNN's own
    static constexpr size_t kShadowBytes = 1024 * 1024;

    const uint32_t pattern_;
};

} // namespace flexnn

#endif // FLEXNN_PATTERN_ALLOCATOR_H
