#ifndef FLEXNN_MAPPED_WEIGHTS_H
#define FLEXNN_MAPPED_WEIGHTS_H

#include "runtime/arena_allocator.h"
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
// (MAP_FIXED, populated: resident off the computing threads), its pages and the page NCNN may
// over-read past its end, as planned (planned_bytes); the pages resident are the plan's. Once the
// layer has computed, the computing thread restores the bytes to the arena's own zero pages, not
// resident until written, before any later tensor there is claimed.
//
// Invariant: a region is mapped over the arena from point() until restore(); the arena is never
// freed or written there in between (the plan gives the bytes to the record alone).
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
    bool opened() const
    {
        return fd_ >= 0;
    }
    // loading thread: the Mats pointed at next are `layer`'s; refused when the file shrank
    Status begin_layer(int layer);
    // loading thread: `weight` over record `m` mapped at its planned arena bytes; false with `error`
    // when the plan has no request for it or the mapping fails
    bool point(const TransformedMat& m, ncnn::Mat& weight, std::string& error);
    // give `layer`'s record pages back (still in the page cache): the arena's zero pages again
    Status restore(int layer);
    // every layer's, before the arena goes
    Status restore_all();
    // bytes mapped now, and the most mapped at once since the last reset_peak
    uint64_t peak_bytes() const;
    void reset_peak();

private:
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
