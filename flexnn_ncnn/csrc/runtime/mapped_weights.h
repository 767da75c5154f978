#ifndef FLEXNN_MAPPED_WEIGHTS_H
#define FLEXNN_MAPPED_WEIGHTS_H

#include "planner/record_pages.h"
#include "runtime/arena_allocator.h"
#include "runtime/by_step.h"
#include "runtime/status.h"

#include <mat.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace flexnn {

struct TransformedMat;

// The pre-transformed weights mapped from their file over the arena bytes the plan gives them,
// instead of read there (RuntimeOptions::map_weights; paper section 3.4 without the copy). While the
// loading thread builds a layer, each transformed Mat NCNN asks for is its record mapped in place
// (MAP_FIXED, faulted in: resident before the layer computes; with loader=computing, by the
// computing team between layers), its pages and the page NCNN may over-read past its end, as
// planned (planned_bytes); the pages resident are the plan's. Once the
// layer has computed, the computing thread gives back to the arena (its own zero pages, not resident
// until written) the pages a written tensor takes next (planner/record_pages.h); the others stay
// the file's until the next record is mapped over them, inside the arena's bytes either way.
//
// Invariant: a page the file's is never written: the plan gives it to the record alone until the
// record's layer has computed, and after that to nothing written before it is given back.
class MappedWeights
{
public:
    // `slots`: the weights allocator, which counts each mapped Mat as the request the plan has for
    // it and says where the plan puts it
    explicit MappedWeights(ArenaAllocator& slots)
        : slots_(slots)
    {
    }
    MappedWeights(const MappedWeights&) = delete;
    MappedWeights& operator=(const MappedWeights&) = delete;

    // the file records are mapped from (kept open by its owner)
    Status open(int fd, const std::string& path);
    // loading thread: the Mats pointed at next are `layer`'s; refused when the file shrank
    Status begin_layer(int layer);
    // the thread loading: `weight` over record `m` mapped at its planned arena bytes, faulted in by
    // `threads` (the computing team when it loads); false with `error` when the plan has no request
    // for it or the mapping fails
    bool point(const TransformedMat& m, ncnn::Mat& weight, int threads, std::string& error);
    // computing thread, once `layer` has computed: `pages` (offsets into the arena at `base`) are
    // the arena's again; its records are no longer counted as mapped
    Status give_back(int layer, unsigned char* base, ByStep<std::pair<uint64_t, uint64_t> >::Values pages);
    // all of `layer`'s record pages (a run that stopped before computing it)
    Status restore(int layer);
    // every page of the arena at `base` up to `bytes`, before it is freed or planned anew
    Status restore_all(unsigned char* base, uint64_t bytes);
    // bytes mapped now, and the most mapped at once since the last reset_peak
    uint64_t peak_bytes() const;
    void reset_peak();

private:
    // Linux's default fault-around window: a read fault on a mapped file page maps the cached pages
    // around it up to this many bytes
    static constexpr size_t kFaultAroundBytes = 64 * 1024;

    // the mapped pages over [address, address + length) resident, one read fault per window
    static void fault_in(const unsigned char* address, size_t length, int threads);
    // the arena's own pages over [address, address + length)
    Status anonymous(unsigned char* address, size_t length) const;

    struct Region
    {
        unsigned char* address;
        size_t length;
    };

    ArenaAllocator& slots_;
    int fd_ = -1;
    std::string path_;
    uint64_t file_bytes_ = 0;
    int current_ = -1; // loading thread

    mutable std::mutex regions_lock_; // the loading thread maps, the computing thread restores
    std::map<int, std::vector<Region> > regions_;
    uint64_t mapped_bytes_ = 0; // every region's length
    uint64_t peak_bytes_ = 0;
};

} // namespace flexnn

#endif // FLEXNN_MAPPED_WEIGHTS_H
