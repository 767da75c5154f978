#include "runtime/arena_canary.h"

#include <algorithm>
#include <array>
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

int64_t ArenaCanary::first_written(uint64_t offset, uint64_t size) const
{
    // a block at a time (memcmp: one range check under a sanitizer, where a byte loop costs one check
    // per byte), then byte by byte inside the first block that differs
    static const std::array<unsigned char, 4096> poisoned = [] {
        std::array<unsigned char, 4096> block;
        block.fill(kPoison);
        return block;
    }();
    const uint64_t end = std::min(offset + size, bytes_);
    for (uint64_t at = offset; at < end; at += poisoned.size())
    {
        const size_t n = (size_t)std::min<uint64_t>(poisoned.size(), end - at);
        if (memcmp(base_ + at, poisoned.data(), n) == 0)
            continue;
        for (size_t i = 0; i < n; i++)
            if (base_[at + i] != kPoison)
                return (int64_t)(at + i - offset);
    }
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
