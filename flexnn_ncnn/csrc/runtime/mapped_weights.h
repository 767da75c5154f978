#ifndef FLEXNN_MAPPED_WEIGHTS_H
#define FLEXNN_MAPPED_WEIGHTS_H

#include "runtime/arena_allocator.h"
#include "runtime/status.h"

#include <mat.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace flexnn {

struct LayerTransforms;
struct TransformedMat;

// The pre-transformed weights mapped from their file instead of read into the arena
// (RuntimeOptions::map_weights; paper section 3.4 without the copy). The loading thread maps a
// window layer's records before building it, populated (resident, read ahead off the computing
// threads); its transformed Mats point at them; once the plan no longer holds the layer's weights
// the records are unmapped. Each record is a mapping of its own, of its pages and the page NCNN may
// over-read past its end (planner/mapped_window.h counts both), so the kernel's fault-around never
// maps a neighbour: the pages resident are those of the records mapped.
class MappedWeights
{
public:
    // `slots`: the weights allocator, which counts each mapped Mat as the request the plan has for it
    explicit MappedWeights(ArenaAllocator& slots)
        : slots_(slots)
    {
    }
    ~MappedWeights();
    MappedWeights(const MappedWeights&) = delete;
    MappedWeights& operator=(const MappedWeights&) = delete;

    // the file records are mapped from (kept open by its owner)
    Status open(int fd, const std::string& path);
    bool opened() const
    {
        return fd_ >= 0;
    }
    // map `layer`'s records, resident; the Mats pointed at next are this layer's
    Status map_layer(int layer, const LayerTransforms& transforms);
    // `weight` over record `m` of the layer mapped last, neither allocated nor copied; false with
    // `error` when that layer has no such record or the plan has no request for it
    bool point(const TransformedMat& m, ncnn::Mat& weight, std::string& error) const;
    // give the layer's pages back (still in the page cache); nothing when it is not mapped
    void unmap_layer(int layer);
    // the most bytes mapped at once since the last reset_peak (what is mapped now, after it)
    uint64_t peak_bytes() const
    {
        return peak_bytes_;
    }
    void reset_peak()
    {
        peak_bytes_ = mapped_bytes_;
    }

private:
    struct Region
    {
        uint64_t offset; // the record's, in the file
        unsigned char* address;
        size_t length;
    };

    void unmap(std::vector<Region>& regions);

    ArenaAllocator& slots_;
    int fd_ = -1;
    std::string path_;
    uint64_t file_bytes_ = 0;
    std::map<int, std::vector<Region> > layers_;
    int current_ = -1;
    uint64_t mapped_bytes_ = 0; // every region's length
    uint64_t peak_bytes_ = 0;
};

// give [p, p + bytes) of a page-aligned anonymous range back to the OS: it reads as zeros and is
// not resident until written again
void drop_pages(unsigned char* p, uint64_t bytes);

} // namespace flexnn

#endif // FLEXNN_MAPPED_WEIGHTS_H
