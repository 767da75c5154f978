#ifndef FLEXNN_PLANNER_OCCUPANCY_H
#define FLEXNN_PLANNER_OCCUPANCY_H

// The blocks already placed in the address x step plane of an arena, and the free-space queries
// the layout needs. Steps follow profile.h's half-open convention: a block over [begin, end) and
// one starting at `end` may share addresses.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace flexnn {

enum class Fit
{
    Lowest,  // the lowest free range that fits (first fit)
    Best,    // the smallest free range that fits, lowest on ties
    Highest, // the top of the highest free range that fits
};

class Occupancy
{
public:
    struct Block
    {
        uint64_t lo, hi; // bytes [lo, hi)
        int begin, end;  // steps [begin, end)
    };

    // Addresses [floor, capacity) over steps [0, step_count).
    Occupancy(uint64_t floor, uint64_t capacity, int step_count);

    void add(const Block& block);
    size_t size() const
    {
        return blocks_.size();
    }
    // Forget every block added after the first `count`.
    void truncate(size_t count);

    // A multiple of `align` where `size` bytes are free over steps [begin, end), chosen by `fit`.
    bool find(uint64_t size, uint64_t align, int begin, int end, Fit fit, uint64_t& offset);

    // The earliest begin in [earliest, latest] such that `size` bytes at a multiple of `align` are
    // free over [begin, end), and an offset there chosen by `fit`.
    bool find_earliest(uint64_t size, uint64_t align, int earliest, int latest, int end, Fit fit, int& begin, uint64_t& offset);

    // The latest end <= `before` among blocks over any of bytes [lo, hi); 0 if none.
    int last_end_before(uint64_t lo, uint64_t hi, int before) const;

private:
    using Ranges = std::vector<std::pair<uint64_t, uint64_t> >; // byte ranges [lo, hi)

    // Fills ranges_ with the free ranges over [begin, end) that hold `size` bytes at a multiple of
    // `align`, disjoint and ascending.
    void free_ranges(int begin, int end, uint64_t size, uint64_t align);

    uint64_t floor_;
    uint64_t capacity_;
    std::vector<Block> blocks_;
    std::vector<std::vector<int> > live_;   // live_[t]: blocks occupying step t, in insertion order
    // ending_[t]: the byte ranges of blocks whose interval ends at t, in insertion order (kept by
    // value: the backward walks of find_earliest read them all)
    std::vector<Ranges> ending_;
    // scratch of the queries, kept to avoid allocating per query
    std::vector<int> ids_;
    Ranges ranges_, earlier_, kept_;
};

} // namespace flexnn

#endif // FLEXNN_PLANNER_OCCUPANCY_H
