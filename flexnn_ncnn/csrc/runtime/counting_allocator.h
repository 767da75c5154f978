#ifndef FLEXNN_COUNTING_ALLOCATOR_H
#define FLEXNN_COUNTING_ALLOCATOR_H

#include <allocator.h>

#include <cstddef>
#include <mutex>
#include <unordered_map>

namespace flexnn {

struct AllocationCounts
{
    size_t current_bytes = 0; // live now
    size_t peak_bytes = 0;    // most live at once
    size_t total_bytes = 0;   // ever allocated
    size_t allocations = 0;   // fastMalloc calls
    size_t largest_bytes = 0; // largest single allocation
};

// A heap allocator that counts what passes through it: how the runtime accounts for memory it
// does not place itself. Thread-safe; every pointer it returns must come back to its fastFree.
class CountingAllocator : public ncnn::Allocator
{
public:
    ~CountingAllocator() override;
    void* fastMalloc(size_t size) override;
    // the same, and the live bytes just after it (read under the same lock)
    void* fastMalloc(size_t size, size_t& live_after);
    void fastFree(void* ptr) override;

    AllocationCounts counts() const;
    // whether ptr is live and came from this allocator
    bool owns(void* ptr) const;
    // forget the peak and total so far (live bytes stay counted)
    void reset_counts();

private:
    mutable std::mutex lock_;
    std::unordered_map<void*, size_t> sizes_;
    AllocationCounts counts_;
};

} // namespace flexnn

#endif // FLEXNN_COUNTING_ALLOCATOR_H
