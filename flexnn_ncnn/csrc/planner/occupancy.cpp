#include "planner/occupancy.h"

#include <algorithm>

namespace flexnn {

namespace {

using Ranges = std::vector<std::pair<uint64_t, uint64_t> >;

uint64_t round_up(uint64_t v, uint64_t align)
{
    return (v + align - 1) / align * align;
}

// Whether [lo, hi) holds `size` bytes starting at a multiple of `align`.
bool holds(uint64_t lo, uint64_t hi, uint64_t size, uint64_t align)
{
    const uint64_t start = round_up(lo, align);
    return start < hi && hi - start >= size;
}

// `ranges` without [lo, hi) into `kept`, keeping only pieces that hold `size` bytes at `align`.
void subtract(const Ranges& ranges, uint64_t lo, uint64_t hi, uint64_t size, uint64_t align, Ranges& kept)
{
    kept.clear();
    for (const auto& r : ranges)
    {
        if (hi <= r.first || lo >= r.second)
        {
            kept.push_back(r);
            continue;
        }
        if (lo > r.first && holds(r.first, lo, size, align))
            kept.emplace_back(r.first, lo);
        if (hi < r.second && holds(hi, r.second, size, align))
            kept.emplace_back(hi, r.second);
    }
}

// Whether [lo, hi) meets any of `ranges`.
bool meets(const Ranges& ranges, uint64_t lo, uint64_t hi)
{
    auto r = std::upper_bound(ranges.begin(), ranges.end(), lo, [](uint64_t v, const std::pair<uint64_t, uint64_t>& x) { return v < x.second; });
    return r != ranges.end() && r->first < hi;
}

// Every range in `ranges` holds `size` bytes at a multiple of `align`.
uint64_t choose(const Ranges& ranges, uint64_t size, uint64_t align, Fit fit)
{
    switch (fit)
    {
    case Fit::Lowest:
        return round_up(ranges.front().first, align);
    case Fit::Highest:
        return (ranges.back().second - size) / align * align;
    case Fit::Best:
        break;
    }
    auto best = ranges.begin();
    for (auto r = ranges.begin(); r != ranges.end(); ++r)
    {
        if (r->second - r->first < best->second - best->first)
            best = r;
    }
    return round_up(best->first, align);
}

} // namespace

Occupancy::Occupancy(uint64_t floor, uint64_t capacity, int step_count)
    : floor_(floor), capacity_(capacity), live_(step_count), ending_(step_count + 1)
{
}

void Occupancy::add(const Block& block)
{
    const int id = static_cast<int>(blocks_.size());
    blocks_.push_back(block);
    for (int t = block.begin; t < block.end; t++)
        live_[t].push_back(id);
    ending_[block.end].emplace_back(block.lo, block.hi);
}

void Occupancy::truncate(size_t count)
{
    // blocks are appended in id order, so the newest ids sit at the back of every list
    while (blocks_.size() > count)
    {
        const Block& b = blocks_.back();
        for (int t = b.begin; t < b.end; t++)
            live_[t].pop_back();
        ending_[b.end].pop_back();
        blocks_.pop_back();
    }
}

void Occupancy::free_ranges(int begin, int end, uint64_t size, uint64_t align)
{
    ids_.clear();
    for (int t = begin; t < end; t++)
        ids_.insert(ids_.end(), live_[t].begin(), live_[t].end());
    std::sort(ids_.begin(), ids_.end(), [this](int a, int b) {
        return blocks_[a].lo != blocks_[b].lo ? blocks_[a].lo < blocks_[b].lo : a < b;
    });
    ranges_.clear();
    uint64_t cursor = floor_;
    for (int id : ids_)
    {
        const Block& b = blocks_[id];
        if (b.lo > cursor && holds(cursor, b.lo, size, align))
            ranges_.emplace_back(cursor, b.lo);
        cursor = std::max(cursor, b.hi);
    }
    if (capacity_ > cursor && holds(cursor, capacity_, size, align))
        ranges_.emplace_back(cursor, capacity_);
}

bool Occupancy::find(uint64_t size, uint64_t align, int begin, int end, Fit fit, uint64_t& offset)
{
    free_ranges(begin, end, size, align);
    if (ranges_.empty())
        return false;
    offset = choose(ranges_, size, align, fit);
    return true;
}

bool Occupancy::find_earliest(uint64_t size, uint64_t align, int earliest, int latest, int end, Fit fit, int& begin, uint64_t& offset)
{
    free_ranges(latest, end, size, align);
    if (ranges_.empty())
        return false;
    // Moving the begin from t to t - 1 adds exactly the blocks that end at t.
    begin = latest;
    for (int t = latest; t > earliest; t--)
    {
        bool narrowed = false;
        for (const auto& b : ending_[t])
        {
            if (!meets(narrowed ? earlier_ : ranges_, b.first, b.second))
                continue;
            subtract(narrowed ? earlier_ : ranges_, b.first, b.second, size, align, kept_);
            earlier_.swap(kept_);
            narrowed = true;
        }
        if (narrowed)
        {
            if (earlier_.empty())
                break;
            ranges_.swap(earlier_);
        }
        begin = t - 1;
    }
    offset = choose(ranges_, size, align, fit);
    return true;
}

int Occupancy::last_end_before(uint64_t lo, uint64_t hi, int before) const
{
    for (int t = before; t > 0; t--)
    {
        for (const auto& b : ending_[t])
        {
            if (b.first < hi && lo < b.second)
                return t;
        }
    }
    return 0;
}

} // namespace flexnn
