#ifndef FLEXNN_PLANNER_LAYOUT_H
#define FLEXNN_PLANNER_LAYOUT_H

// One pass of the paper's Algorithm 1 at one arena capacity: pinned weights stacked from address 0,
// activations first at both ends of the rest, then per layer its weights with the earliest
// feasible preload and the block of its intermediates; a layer that does not fit is laid out again without
// preloading; a layer that still does not fit fails the pass. Or (LayoutRequest::packing) every
// tensor placed over its own steps, in one of three greedy orders; a weight then loads as soon as
// its bytes are free.

#include "planner/plan.h"
#include "planner/profile.h"

#include <vector>

namespace flexnn {

// The profile regrouped for layout passes: computed once, shared by every pass of one plan.
struct LayoutInput
{
    // mapped: transformed records are mapped in place (planned_bytes, planned_alignment)
    LayoutInput(const Profile& profile, uint64_t alignment, bool mapped);

    const Profile& profile;
    uint64_t alignment;
    bool mapped;
    std::vector<uint64_t> sizes;                    // planned_bytes, parallel to profile.tensors
    std::vector<uint64_t> aligns;                   // planned_alignment, parallel to profile.tensors
    uint64_t max_align;                             // the largest of aligns (alignment when none)
    std::vector<int> activations;                   // by (first_use, index)
    std::vector<std::vector<int> > weights;         // per layer, by ordinal
    std::vector<std::vector<int> > intermediates;   // per layer, by ordinal
    // A layer's intermediates are placed as one block over its step, laid out among themselves
    // first: those whose request intervals do not overlap share bytes (request_interval).
    std::vector<uint64_t> block_bytes; // per layer: its intermediates' block, 0 without any
    std::vector<uint64_t> in_block;    // parallel to profile.tensors: an intermediate's offset in its block
};

// How a pass orders the tensors it places. LayerOrder is Algorithm 1's pass; the greedy orders place
// every tensor over its own steps at the lowest offset free there, and pack closer to the live-bytes
// lower bound where the layer-order pass leaves gaps no later tensor fits. None of them is best on
// every profile (the smallest budgets try all three).
enum class Packing
{
    LayerOrder,
    ByArea,     // bytes x steps, largest first: long-lived and large tensors settle low
    BySize,     // bytes, largest first
    ByLifetime, // steps, longest first
};

struct LayoutRequest
{
    uint64_t capacity;        // usable arena bytes, a multiple of the alignment
    Algorithm algorithm;
    bool preload; // off: every weight is claimed at its layer (a cheaper probe)
    std::vector<int> pinned_layers; // their weights are pinned, stacked in this order from address 0
    // a mapped input: records from the top of the arena, every other tensor from the bottom
    // (layout.cpp's fits_for); off, or not mapped: the algorithm's fit for all
    bool zoned = false;
    Packing packing = Packing::LayerOrder;
};

// Fills `placements` (parallel to the profile's tensors) with offsets and load times, or returns
// why the layout does not fit.
Status lay_out(const LayoutInput& input, const LayoutRequest& request, std::vector<Placement>& placements);

} // namespace flexnn

#endif // FLEXNN_PLANNER_LAYOUT_H
