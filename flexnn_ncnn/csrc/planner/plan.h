#ifndef FLEXNN_PLANNER_PLAN_H
#define FLEXNN_PLANNER_PLAN_H

// The planner's output: where every tensor of a Profile lives in the arena and when its bytes are
// claimed, plus the comp -> load dependencies the runtime must honour.
//
// Runtime contract. load(j) reads every non-pinned weight of layer j into its offset; it may start
// once comp(i) has finished for every dependency {i, j}, and comp(j) starts once load(j) has
// finished. Pinned weights are read once, before the first inference, and stay resident. Because
// layers compute in index order, waiting for comp(i) also waits for every comp(i' < i): the list
// holds, per loading layer, only the latest computation it waits for.

#include <cstdint>
#include <vector>

namespace flexnn {

enum class Algorithm
{
    Algorithm1 = 0, // the paper's Algorithm 1: first fit, earliest preload, no pinning
    FlexNN = 1,     // best fit, preloads in loader order, pinning chosen by the expected I/O stall
    SwapNet = 2,    // block streaming, the benchmark's baseline (flexnn_ncnn/bench/swapnet.py): checked and run, never planned here
};

const char* algorithm_name(Algorithm algorithm);

struct Placement
{
    uint64_t offset; // from the arena's start; a multiple of its tensor's planned_alignment()
    // The tensor's bytes are claimed once comp(load_after) has finished (-1: at inference start), so
    // it occupies steps [load_after + 1, last_use + 1). Weights: the layer's load time, shared by
    // its non-pinned weights. Activations and intermediates: fixed at first_use - 1.
    int load_after;
    bool pinned; // weights only: resident across inferences, occupies every step; load_after == -1
};

// a mapped record occupies whole pages of its file
constexpr uint64_t kMappedPage = 4096;

struct TensorUse;

// What a tensor takes in a plan of `alignment` (Plan::mapped: `mapped`). A transformed record the
// runtime maps in place starts at a page and takes its pages and the page NCNN may over-read past
// its end; every other tensor takes its size rounded up to the alignment, at a multiple of it.
uint64_t planned_bytes(const TensorUse& t, bool mapped, uint64_t alignment);
uint64_t planned_alignment(const TensorUse& t, bool mapped, uint64_t alignment);

struct Dependency
{
    int comp; // load(load) waits for comp(comp); comp < load
    int load;
};

struct Plan
{
    Algorithm algorithm = Algorithm::FlexNN;
    uint64_t budget = 0;      // bytes the plan was made for
    uint64_t alignment = 0;   // every size is rounded up to, and every offset is a multiple of, this
    uint64_t arena_bytes = 0; // bytes the plan lays out; <= budget
    // the runtime maps each transformed record from its file over the arena bytes planned for it
    // (whole pages, planned_bytes) instead of reading it there; the pages resident are the same
    bool mapped = false;
    uint64_t lower_bound = 0; // live_bytes_lower_bound() of the profile
    std::vector<Placement> tensors;        // parallel to Profile::tensors
    std::vector<Dependency> dependencies;  // sorted by load, one per loading layer that waits
};

} // namespace flexnn

#endif // FLEXNN_PLANNER_PLAN_H
