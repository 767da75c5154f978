#include "planner/planner.h"

#include "planner/layout.h"
#include "planner/stall.h"

#include <algorithm>
#include <numeric>

namespace flexnn {

namespace {

// The bisection's upper end starts at the sum of all sizes and may double this often.
constexpr int kUpperDoublings = 3;

uint64_t usable(uint64_t budget, uint64_t alignment)
{
    return budget / alignment * alignment;
}

// make_plan's first layout at `budget`, unpinned: zoned when the input is mapped, else (or when
// that does not fit) the algorithm's fit for all; when neither fits, FlexNN's greedy packings in
// turn (the smallest budgets). `request` becomes the one laid out.
Status first_layout(const LayoutInput& in, uint64_t budget, Algorithm algorithm, LayoutRequest& request,
                    std::vector<Placement>& placements)
{
    request = {usable(budget, in.alignment), algorithm, true, {}, in.mapped};
    Status fit = lay_out(in, request, placements);
    if (!fit.ok() && request.zoned)
    {
        request.zoned = false;
        fit = lay_out(in, request, placements);
    }
    if (fit.ok() || algorithm != Algorithm::FlexNN)
        return fit;
    for (Packing packing : {Packing::ByArea, Packing::BySize, Packing::ByLifetime})
    {
        LayoutRequest greedy = request;
        greedy.packing = packing;
        if (lay_out(in, greedy, placements).ok())
        {
            request = greedy;
            return Status();
        }
    }
    return fit;
}

// Whether make_plan succeeds at `budget`.
bool fits(const LayoutInput& in, uint64_t budget, Algorithm algorithm)
{
    LayoutRequest request;
    std::vector<Placement> placements;
    return first_layout(in, budget, algorithm, request, placements).ok();
}

// The smallest multiple of the alignment above `infeasible` (a budget that does not fit) that fits; 0 if none found.
uint64_t bisect_min_budget(const LayoutInput& in, uint64_t infeasible, Algorithm algorithm)
{
    uint64_t lo = usable(infeasible, in.alignment);
    uint64_t hi = std::max(std::accumulate(in.sizes.begin(), in.sizes.end(), uint64_t(0)), lo + in.alignment);
    for (int doublings = 0; !fits(in, hi, algorithm); doublings++)
    {
        if (doublings == kUpperDoublings)
            return 0;
        lo = hi;
        hi *= 2;
    }
    // invariant: lo does not fit, hi fits, both multiples of the alignment
    while (hi - lo > in.alignment)
    {
        const uint64_t mid = usable(lo + (hi - lo) / 2, in.alignment);
        (fits(in, mid, algorithm) ? hi : lo) = mid;
    }
    return hi;
}

// One comp(i) -> load(j) per loading layer j whose load waits for a computation.
std::vector<Dependency> dependencies_of(const LayoutInput& in, const std::vector<Placement>& placements)
{
    std::vector<Dependency> dependencies;
    for (int layer = 0; layer < static_cast<int>(in.weights.size()); layer++)
    {
        for (int w : in.weights[layer])
        {
            if (!placements[w].pinned && placements[w].load_after >= 0)
            {
                dependencies.push_back({placements[w].load_after, layer});
                break;
            }
        }
    }
    return dependencies;
}

// Closes every address range no tensor ever uses, in whole multiples of the largest alignment so
// every offset keeps its own; keeps the address order, so no two tensors come to share bytes that
// did not before. Returns the arena size.
uint64_t compact(const LayoutInput& in, std::vector<Placement>& placements)
{
    std::vector<int> order(placements.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&placements](int a, int b) {
        return placements[a].offset != placements[b].offset ? placements[a].offset < placements[b].offset : a < b;
    });
    uint64_t reach = 0, shift = 0; // reach: end of the used bytes so far, before shifting
    for (int i : order)
    {
        Placement& p = placements[i];
        if (p.offset > reach)
            shift += (p.offset - reach) / in.max_align * in.max_align;
        reach = std::max(reach, p.offset + in.sizes[i]);
        p.offset -= shift;
    }
    return reach - shift;
}

Plan finish(const LayoutInput& in, const PlannerOptions& options, uint64_t budget, std::vector<Placement> placements)
{
    Plan plan;
    plan.algorithm = options.algorithm;
    plan.budget = budget;
    plan.alignment = in.alignment;
    plan.dependencies = dependencies_of(in, placements);
    plan.arena_bytes = compact(in, placements);
    plan.mapped = in.mapped;
    plan.lower_bound = live_bytes_lower_bound(in.profile, in.alignment);
    plan.tensors = std::move(placements);
    return plan;
}

// Pinning policy. Layers are ranked by the load time pinning saves per byte (ties: the earlier
// layer, which has less computation ahead of it to hide its load); the pinned set is a prefix of
// that ranking. The longest prefix that fits without preloading is found by bisection (cheap
// probes: preloading rarely changes whether pins fit, and every candidate is laid out again in
// full). That prefix and 3/4, 1/2 and 1/4 of it, most pinned first, are compared with the
// unpinned plan by expected_stall_us(): the least stall wins, ties going to more pinned bytes, and
// a candidate without stall ends the search.
Plan choose_pinning(const LayoutInput& in, const PlannerOptions& options, const LayoutRequest& base, uint64_t budget, Plan unpinned)
{
    const Profile& profile = in.profile;
    std::vector<uint64_t> weight_bytes(profile.layers.size(), 0);
    for (size_t i = 0; i < profile.tensors.size(); i++)
    {
        if (profile.tensors[i].role == Role::Weight)
            weight_bytes[profile.tensors[i].layer] += in.sizes[i];
    }
    std::vector<int> ranked;
    for (int l = 0; l < static_cast<int>(weight_bytes.size()); l++)
    {
        if (weight_bytes[l] > 0)
            ranked.push_back(l);
    }
    std::sort(ranked.begin(), ranked.end(), [&](int a, int b) {
        const double sa = profile.layers[a].load_us / weight_bytes[a], sb = profile.layers[b].load_us / weight_bytes[b];
        return sa != sb ? sa > sb : a < b;
    });

    if (ranked.empty())
        return unpinned;
    auto lay_out_pinned = [&](size_t count, bool preload, std::vector<Placement>& placements) {
        LayoutRequest request = base;
        request.preload = preload;
        request.pinned_layers.assign(ranked.begin(), ranked.begin() + count);
        return lay_out(in, request, placements).ok();
    };
    std::vector<Placement> placements;
    size_t longest = ranked.size();
    if (!lay_out_pinned(longest, false, placements))
    {
        size_t lo = 0, hi = longest; // lo fits, hi does not
        while (hi - lo > 1)
        {
            const size_t mid = lo + (hi - lo) / 2;
            (lay_out_pinned(mid, false, placements) ? lo : hi) = mid;
        }
        longest = lo;
    }

    Plan best = std::move(unpinned);
    double best_stall = expected_stall_us(profile, best);
    bool pinned = false;
    const size_t candidates[] = {longest, longest * 3 / 4, longest / 2, longest / 4};
    for (size_t count : candidates)
    {
        if (count == 0 || !lay_out_pinned(count, true, placements))
            continue;
        Plan plan = finish(in, options, budget, placements);
        const double stall = expected_stall_us(profile, plan);
        if (stall < best_stall || (stall == best_stall && !pinned))
        {
            best = std::move(plan);
            best_stall = stall;
            pinned = true;
        }
        if (stall == 0)
            break;
    }
    return best;
}

} // namespace

const char* algorithm_name(Algorithm algorithm)
{
    switch (algorithm)
    {
    case Algorithm::Algorithm1:
        return "algorithm1";
    case Algorithm::SwapNet:
        return "swapnet";
    case Algorithm::FlexNN:
        break;
    }
    return "flexnn";
}

PlanResult make_plan(const Profile& profile, uint64_t budget, const PlannerOptions& options)
{
    PlanResult result;
    if (options.alignment == 0)
    {
        result.status = Status::error("planner: alignment must be at least 1 byte");
        return result;
    }
    result.status = validate_profile(profile);
    if (!result.status.ok())
        return result;
    const LayoutInput in(profile, options.alignment, options.map_transformed);
    std::vector<Placement> placements;
    LayoutRequest request;
    const Status fit = first_layout(in, budget, options.algorithm, request, placements);
    if (!fit.ok())
    {
        result.infeasible = true;
        result.min_feasible_budget = bisect_min_budget(in, budget, options.algorithm);
        result.status = Status::error("budget " + std::to_string(budget) + " B is infeasible for this profile: " + fit.message());
        return result;
    }
    Plan plan = finish(in, options, budget, std::move(placements));
    if (options.algorithm == Algorithm::FlexNN)
        plan = choose_pinning(in, options, request, budget, std::move(plan));
    result.plan = std::move(plan);
    return result;
}

uint64_t min_feasible_budget(const Profile& profile, const PlannerOptions& options)
{
    if (options.alignment == 0 || !validate_profile(profile).ok())
        return 0;
    const LayoutInput in(profile, options.alignment, options.map_transformed);
    const uint64_t lower_bound = live_bytes_lower_bound(profile, options.alignment);
    if (fits(in, lower_bound, options.algorithm))
        return lower_bound;
    return bisect_min_budget(in, lower_bound, options.algorithm);
}

} // namespace flexnn
