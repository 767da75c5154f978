#include "runtime/arena_canary.h"

#include <algorithm>
#include <cstring>

namespace flexnn {

void ArenaCanary::bind(unsigned char* base, uint64_t bytes)
{
    base_ = base;
    bytes_ = base ? bytes : 0;
    {
        std::lock_guard<std::mutex> guard(lock_);
        served_.clear();
    }
    poison(0, bytes_);
}

void ArenaCanary::poison_all_but(const std::vector<std::pair<uint64_t, uint64_t> >& kept)
{
    std::vector<std::pair<uint64_t, uint64_t> > sorted = kept;
    std::sort(sorted.begin(), sorted.end());
    uint64_t at = 0;
    for (const auto& range : sorted)
    {
        if (range.first > at)
            poison(at, range.first - at);
        at = std::max(at, range.first + range.second);
    }
    if (at < bytes_)
        poison(at, bytes_ - at);
    std::lock_guard<std::mutex> guard(lock_);
    served_.clear();
}

void ArenaCanary::poison(uint64_t offset, uint64_t size)
{
    if (offset < bytes_)
        memset(base_ + offset, kPoison, (size_t)std::min(size, bytes_ - offset));
}

// Left out of ThreadSanitizer's instrumentation: a diagnostic read of bytes the plan says no tensor
// uses (every write that matters is NCNN's, and instrumented), which at one check per access made a
// real-size model crawl. A word at a time, then the first differing byte.
__attribute__((no_sanitize("thread"))) int64_t ArenaCanary::first_written(uint64_t offset, uint64_t size) const
{
    const uint64_t end = std::min(offset + size, bytes_);
    const uint64_t poisoned = 0x0101010101010101ull * kPoison;
    uint64_t at = offset;
    for (uint64_t word; at + sizeof(word) <= end; at += sizeof(word))
    {
        memcpy(&word, base_ + at, sizeof(word));
        if (word != poisoned)
            break;
    }
    for (; at < end; at++)
        if (base_[at] != kPoison)
            return (int64_t)(at - offset);
    return -1;
}

void ArenaCanary::served(void* ptr, uint64_t size)
{
    std::lock_guard<std::mutex> guard(lock_);
    served_[ptr] = size;
}

bool ArenaCanary::released(void* ptr)
{
    uint64_t size = 0;
    {
        std::lock_guard<std::mutex> guard(lock_);
        auto it = served_.find(ptr);
        if (it == served_.end())
            return false;
        size = it->second;
        served_.erase(it);
    }
    poison((uint64_t)((unsigned char*)ptr - base_), size);
    return true;
}

} // namespace flexnn
