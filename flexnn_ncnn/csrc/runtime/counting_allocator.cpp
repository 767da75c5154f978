#include "runtime/counting_allocator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace flexnn {

CountingAllocator::~CountingAllocator()
{
    // A Mat outliving its allocator would free into a dead object: a bug, not a recoverable state.
    if (!sizes_.empty())
    {
        fprintf(stderr, "flexnn: CountingAllocator destroyed with %zu live allocations\n", sizes_.size());
        std::abort();
    }
}

void* CountingAllocator::fastMalloc(size_t size)
{
    size_t live_after = 0;
    return fastMalloc(size, live_after);
}

void* CountingAllocator::fastMalloc(size_t size, size_t& live_after)
{
    void* ptr = ncnn::fastMalloc(size);
    std::lock_guard<std::mutex> guard(lock_);
    live_after = counts_.current_bytes;
    if (!ptr)
        return ptr;
    sizes_[ptr] = size;
    counts_.current_bytes += size;
    counts_.total_bytes += size;
    counts_.allocations += 1;
    counts_.largest_bytes = std::max(counts_.largest_bytes, size);
    counts_.peak_bytes = std::max(counts_.peak_bytes, counts_.current_bytes);
    live_after = counts_.current_bytes;
    return ptr;
}

void CountingAllocator::fastFree(void* ptr)
{
    if (!ptr)
        return;
    {
        std::lock_guard<std::mutex> guard(lock_);
        auto it = sizes_.find(ptr);
        if (it == sizes_.end())
        {
            fprintf(stderr, "flexnn: CountingAllocator asked to free %p it never allocated\n", ptr);
            std::abort();
        }
        counts_.current_bytes -= it->second;
        sizes_.erase(it);
    }
    ncnn::fastFree(ptr);
}

bool CountingAllocator::owns(void* ptr) const
{
    std::lock_guard<std::mutex> guard(lock_);
    return sizes_.count(ptr) != 0;
}

void CountingAllocator::reset_counts()
{
    std::lock_guard<std::mutex> guard(lock_);
    counts_.peak_bytes = counts_.current_bytes;
    counts_.total_bytes = 0;
    counts_.allocations = 0;
}

AllocationCounts CountingAllocator::counts() const
{
    std::lock_guard<std::mutex> guard(lock_);
    return counts_;
}

} // namespace flexnn
