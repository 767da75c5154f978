#include "planner/layout.h"

#include "planner/occupancy.h"

#include <algorithm>

namespace flexnn {

namespace {

// How each kind of tensor picks among the free ranges that hold it.
struct Fits
{
    Fit record;       // a transformed record of a mapped plan
    Fit weight;       // any other weight
    Fit intermediate;
    bool both_ends;   // activations at whichever end of the arena keeps their side lower, or lowest
};

// Zoned (a mapped plan's first choice): records from the top, everything else from the bottom, so
// few bytes a record was mapped over are written next: each such page comes back to the arena as a
// fresh zero page, faulted in by its next writer.
Fits fits_for(const LayoutInput& in, const LayoutRequest& request)
{
    if (in.mapped && request.zoned)
        return {Fit::Highest, Fit::Lowest, Fit::Lowest, false};
    const Fit fit = request.algorithm == Algorithm::FlexNN ? Fit::Best : Fit::Lowest;
    return {fit, fit, fit, true};
}

// Places layer `layer`'s non-pinned weights (preloaded as early as space allows, not before
// `earliest`, or at their layer when `preload` is off) and then its intermediates. Returns the
// index of the first tensor that does not fit, or -1. `load_begin` becomes the latest step at
// which one of its weights is planned to be claimed, -1 when it loads nothing.
//
// The weights' load time is then derived from the layout: the latest computation that last uses
// bytes they are laid over (every tensor before them in time is already placed: activations
// first, then layers in order). It is never later than planned, so the weights may occupy their
// bytes longer than planned; no tensor placed afterwards minds, since it belongs to a later layer
// and may share these bytes only by beginning after the weights end.
int place_layer(const LayoutInput& in, int layer, bool preload, int earliest, const Fits& fits, bool pinned, Occupancy& occupancy,
                std::vector<Placement>& placements, int& load_begin)
{
    load_begin = -1;
    if (!pinned)
    {
        int load_after = -1;
        for (int i : in.weights[layer])
        {
            const uint64_t size = in.sizes[i];
            const int end = in.profile.tensors[i].last_use + 1;
            int begin = layer;
            uint64_t offset = 0;
            const uint64_t align = in.aligns[i];
            const Fit fit = in.mapped && in.profile.tensors[i].transformed ? fits.record : fits.weight;
            const bool found = preload ? occupancy.find_earliest(size, align, earliest, layer, end, fit, begin, offset)
                                       : occupancy.find(size, align, layer, end, fit, offset);
            if (!found)
                return i;
            load_after = std::max(load_after, occupancy.last_end_before(offset, offset + size, begin) - 1);
            occupancy.add({offset, offset + size, begin, end});
            placements[i].offset = offset;
            load_begin = std::max(load_begin, begin);
        }
        for (int i : in.weights[layer])
            placements[i].load_after = load_after;
    }
    const std::vector<int>& block = in.intermediates[layer];
    if (block.empty())
        return -1;
    uint64_t offset = 0;
    if (!occupancy.find(in.block_bytes[layer], in.alignment, layer, layer + 1, fits.intermediate, offset))
        return block.front();
    occupancy.add({offset, offset + in.block_bytes[layer], layer, layer + 1});
    for (int i : block)
        placements[i].offset = offset + in.in_block[i];
    return -1;
}

// the bytes tensor `i` is placed as: its own, or its layer's intermediate block
uint64_t placed_bytes(const LayoutInput& in, int i)
{
    const TensorUse& t = in.profile.tensors[i];
    return t.role == Role::Intermediate ? in.block_bytes[t.layer] : in.sizes[i];
}

Status does_not_fit(const LayoutInput& in, int tensor, const LayoutRequest& request)
{
    const TensorUse& t = in.profile.tensors[tensor];
    const std::string what = t.role == Role::Intermediate ? "layer " + std::to_string(t.layer) + "'s intermediates" : tensor_name(t);
    return Status::error(what + " (" + std::to_string(placed_bytes(in, tensor)) + " B) do" + (t.role == Role::Intermediate ? "" : "es") +
                         " not fit in " + std::to_string(request.capacity) + " B");
}

// Lays out one layer's intermediates (by ordinal) among themselves: each at the lowest offset
// free over its request interval. Returns the block's bytes.
uint64_t lay_out_block(const LayoutInput& in, const std::vector<int>& intermediates, std::vector<uint64_t>& in_block)
{
    struct Held
    {
        uint64_t lo, hi;
        int until; // released before this request
    };
    std::vector<Held> held; // by lo
    uint64_t bytes = 0;
    for (int i : intermediates)
    {
        const std::pair<int, int> live = request_interval(in.profile.tensors[i]);
        held.erase(std::remove_if(held.begin(), held.end(), [&live](const Held& h) { return h.until <= live.first; }), held.end());
        uint64_t offset = 0;
        for (const Held& h : held)
        {
            if (h.lo >= offset + in.sizes[i])
                break; // the gap below h holds it
            offset = std::max(offset, h.hi);
        }
        held.insert(std::upper_bound(held.begin(), held.end(), offset, [](uint64_t lo, const Held& h) { return lo < h.lo; }),
                    {offset, offset + in.sizes[i], live.second});
        in_block[i] = offset;
        bytes = std::max(bytes, offset + in.sizes[i]);
    }
    return bytes;
}

// Greedy: every non-pinned tensor over [first_use, last_use + 1), in the request's packing order
// (ties: the profile's order), at the lowest offset free over its steps. A weight's load then waits
// for the latest computation that last used bytes it is laid over, as in place_layer.
Status lay_out_greedy(const LayoutInput& in, const LayoutRequest& request, const std::vector<char>& pinned, Occupancy& occupancy,
                       std::vector<Placement>& placements)
{
    const std::vector<TensorUse>& tensors = in.profile.tensors;
    std::vector<int> order;
    for (int i = 0; i < static_cast<int>(tensors.size()); i++)
    {
        const TensorUse& t = tensors[i];
        const bool placed_with_block = t.role == Role::Intermediate && in.intermediates[t.layer].front() != i;
        if ((t.role != Role::Weight || !pinned[t.layer]) && !placed_with_block)
            order.push_back(i);
    }
    std::vector<double> key(tensors.size());
    for (int i : order)
    {
        const double bytes = double(placed_bytes(in, i)), steps = tensors[i].last_use - tensors[i].first_use + 1;
        key[i] = request.packing == Packing::BySize ? bytes : request.packing == Packing::ByLifetime ? steps : bytes * steps;
    }
    std::stable_sort(order.begin(), order.end(), [&key](int a, int b) { return key[a] > key[b]; });
    for (int i : order)
    {
        const TensorUse& t = tensors[i];
        const uint64_t bytes = placed_bytes(in, i);
        uint64_t offset = 0;
        if (!occupancy.find(bytes, in.aligns[i], t.first_use, t.last_use + 1, Fit::Lowest, offset))
            return does_not_fit(in, i, request);
        occupancy.add({offset, offset + bytes, t.first_use, t.last_use + 1});
        if (t.role != Role::Intermediate)
            placements[i].offset = offset;
        else
            for (int m : in.intermediates[t.layer])
                placements[m].offset = offset + in.in_block[m];
    }
    for (int layer = 0; layer < static_cast<int>(in.weights.size()); layer++)
    {
        if (pinned[layer])
            continue;
        int load_after = -1;
        for (int i : in.weights[layer])
            load_after = std::max(load_after, occupancy.last_end_before(placements[i].offset, placements[i].offset + in.sizes[i], layer) - 1);
        for (int i : in.weights[layer])
            placements[i].load_after = load_after;
    }
    return Status();
}

} // namespace

LayoutInput::LayoutInput(const Profile& p, uint64_t a, bool m)
    : profile(p), alignment(a), mapped(m), max_align(a), weights(p.layers.size()), intermediates(p.layers.size())
{
    sizes.reserve(p.tensors.size());
    aligns.reserve(p.tensors.size());
    for (const TensorUse& t : p.tensors)
    {
        sizes.push_back(planned_bytes(t, mapped, alignment));
        aligns.push_back(planned_alignment(t, mapped, alignment));
        max_align = std::max(max_align, aligns.back());
    }
    for (int i = 0; i < static_cast<int>(p.tensors.size()); i++)
    {
        const TensorUse& t = p.tensors[i];
        if (t.role == Role::Activation)
            activations.push_back(i);
        else
            (t.role == Role::Weight ? weights : intermediates)[t.layer].push_back(i);
    }
    auto by_first_use = [&p](int a, int b) {
        return p.tensors[a].first_use != p.tensors[b].first_use ? p.tensors[a].first_use < p.tensors[b].first_use : a < b;
    };
    auto by_ordinal = [&p](int a, int b) {
        return p.tensors[a].ordinal < p.tensors[b].ordinal;
    };
    std::sort(activations.begin(), activations.end(), by_first_use);
    for (auto& w : weights)
        std::sort(w.begin(), w.end(), by_ordinal);
    for (auto& m : intermediates)
        std::sort(m.begin(), m.end(), by_ordinal);
    block_bytes.assign(p.layers.size(), 0);
    in_block.assign(p.tensors.size(), 0);
    for (size_t layer = 0; layer < intermediates.size(); layer++)
        block_bytes[layer] = lay_out_block(*this, intermediates[layer], in_block);
}

Status lay_out(const LayoutInput& in, const LayoutRequest& request, std::vector<Placement>& placements)
{
    const Profile& profile = in.profile;
    const int layer_count = static_cast<int>(profile.layers.size());
    placements.resize(profile.tensors.size());
    for (size_t i = 0; i < profile.tensors.size(); i++)
        placements[i] = {0, profile.tensors[i].first_use - 1, false};

    // pinned weights: resident over every step, stacked from 0; the rest of the arena starts above them
    std::vector<char> pinned(layer_count, 0);
    uint64_t floor = 0;
    for (int layer : request.pinned_layers)
    {
        pinned[layer] = 1;
        for (int i : in.weights[layer])
        {
            placements[i] = {align_up(floor, in.aligns[i]), -1, true};
            floor = placements[i].offset + in.sizes[i];
        }
    }
    if (floor > request.capacity)
        return Status::error("the pinned weights (" + std::to_string(floor) + " B) do not fit in " + std::to_string(request.capacity) + " B");
    Occupancy occupancy(floor, request.capacity, layer_count);
    if (request.packing != Packing::LayerOrder)
        return lay_out_greedy(in, request, pinned, occupancy, placements);

    // activations first, each at the end of the arena where it keeps its side lower (zoned: the bottom)
    const Fits fits = fits_for(in, request);
    for (int i : in.activations)
    {
        const TensorUse& t = profile.tensors[i];
        const uint64_t size = in.sizes[i];
        uint64_t low = 0, high = 0;
        const bool low_ok = occupancy.find(size, in.aligns[i], t.first_use, t.last_use + 1, Fit::Lowest, low);
        const bool high_ok = occupancy.find(size, in.aligns[i], t.first_use, t.last_use + 1, Fit::Highest, high);
        if (!low_ok)
            return does_not_fit(in, i, request);
        const uint64_t low_side = low + size - floor, high_side = request.capacity - high;
        const uint64_t offset = fits.both_ends && high_ok && high_side < low_side ? high : low;
        occupancy.add({offset, offset + size, t.first_use, t.last_use + 1});
        placements[i].offset = offset;
    }

    // Algorithm 1 preloads as early as space allows; FlexNN no earlier than the previous load's
    // planned start, since the loading thread reads layers in order anyway.
    const bool in_order = request.algorithm == Algorithm::FlexNN;
    int previous_begin = 0;
    for (int layer = 0; layer < layer_count; layer++)
    {
        const size_t mark = occupancy.size();
        int load_begin = -1;
        if (!request.preload || place_layer(in, layer, true, in_order ? previous_begin : 0, fits, pinned[layer], occupancy, placements, load_begin) >= 0)
        {
            occupancy.truncate(mark);
            const int failed = place_layer(in, layer, false, layer, fits, pinned[layer], occupancy, placements, load_begin);
            if (failed >= 0)
                return does_not_fit(in, failed, request);
        }
        if (load_begin >= 0)
            previous_begin = load_begin;
    }
    return Status();
}

} // namespace flexnn
