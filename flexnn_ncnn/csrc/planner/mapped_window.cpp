#include "planner/mapped_window.h"

#include <algorithm>
#include <map>

namespace flexnn {

namespace {

// One side of the split: its own profile (layer indices and costs unchanged) and where each of its
// tensors is in the whole profile.
struct Part
{
    Profile profile;
    std::vector<size_t> whole; // part tensor -> whole tensor
};

void split(const Profile& profile, Part& arena, Part& window)
{
    const std::vector<bool> in_window = window_layers(profile);
    arena.profile.layers = window.profile.layers = profile.layers;
    for (size_t i = 0; i < profile.tensors.size(); i++)
    {
        const TensorUse& t = profile.tensors[i];
        Part& part = t.role == Role::Weight && in_window[t.layer] ? window : arena;
        part.profile.tensors.push_back(t);
        part.profile.tensors.back().size = window_bytes(t);
        part.whole.push_back(i);
    }
}

PlannerOptions unmapped(const PlannerOptions& options, uint64_t alignment)
{
    PlannerOptions o = options;
    o.map_transformed = false;
    o.alignment = alignment;
    return o;
}

// the window's alignment: whole pages, and still a multiple of the plan's
uint64_t page_alignment(const PlannerOptions& options)
{
    return kMappedPage % options.alignment == 0 ? kMappedPage : align_up(kMappedPage, options.alignment);
}

// The arena proper at its smallest: its plan (empty when it has no tensors), its bytes rounded up
// to where the window starts, or a failed result.
PlanResult plan_arena(const Part& arena, const PlannerOptions& options, uint64_t& window_from)
{
    PlanResult result;
    window_from = 0;
    if (arena.profile.tensors.empty())
        return result;
    const PlannerOptions o = unmapped(options, options.alignment);
    const uint64_t smallest = min_feasible_budget(arena.profile, o);
    if (!smallest)
    {
        result.status = Status::error("planner: no budget holds the activations and unmapped weights");
        return result;
    }
    result = make_plan(arena.profile, smallest, o);
    if (result.status.ok())
        window_from = align_up(result.plan.arena_bytes, page_alignment(options));
    return result;
}

} // namespace

uint64_t window_bytes(const TensorUse& t)
{
    return t.transformed ? align_up(t.size, kMappedPage) + kMappedPage : t.size;
}

std::vector<bool> window_layers(const Profile& profile)
{
    std::vector<bool> in_window(profile.layers.size(), false);
    for (const TensorUse& t : profile.tensors)
        if (t.transformed && t.layer >= 0 && t.layer < (int)in_window.size())
            in_window[t.layer] = true;
    return in_window;
}

bool has_window(const Profile& profile)
{
    const std::vector<bool> in_window = window_layers(profile);
    return std::find(in_window.begin(), in_window.end(), true) != in_window.end();
}

PlanResult make_mapped_plan(const Profile& profile, uint64_t budget, const PlannerOptions& options)
{
    Part arena, window;
    split(profile, arena, window);
    uint64_t window_from = 0;
    PlanResult result = plan_arena(arena, options, window_from);
    if (!result.status.ok())
        return result;
    const PlannerOptions paged = unmapped(options, page_alignment(options));
    const uint64_t usable = budget / options.alignment * options.alignment;
    PlanResult windowed;
    if (usable > window_from)
        windowed = make_plan(window.profile, usable - window_from, paged);
    if (usable <= window_from || !windowed.status.ok())
    {
        PlanResult failed;
        failed.infeasible = true;
        const uint64_t window_min = min_feasible_budget(window.profile, paged);
        failed.min_feasible_budget = window_min ? window_from + window_min : 0;
        failed.status = Status::error("budget " + std::to_string(budget) + " B is infeasible for this profile: the arena needs "
                                      + std::to_string(window_from) + " B beside the mapped window"
                                      + (windowed.status.ok() ? std::string() : ", and " + windowed.status.message()));
        return failed;
    }

    Plan& plan = result.plan;
    const Plan& w = windowed.plan;
    std::vector<Placement> placements(profile.tensors.size());
    for (size_t i = 0; i < arena.whole.size(); i++)
        placements[arena.whole[i]] = plan.tensors[i];
    for (size_t i = 0; i < window.whole.size(); i++)
    {
        Placement p = w.tensors[i];
        p.offset += window_from;
        placements[window.whole[i]] = p;
    }
    // each layer loads in one part: its dependencies come from that part's plan
    std::map<int, int> waits; // load -> comp
    const Plan* parts[] = {&plan, &w};
    for (const Plan* part : parts)
        for (const Dependency& d : part->dependencies)
            waits[d.load] = std::max(waits.count(d.load) ? waits[d.load] : d.comp, d.comp);
    plan.dependencies.clear();
    for (const auto& lc : waits)
        plan.dependencies.push_back({lc.second, lc.first});
    plan.tensors = std::move(placements);
    plan.algorithm = options.algorithm;
    plan.budget = budget;
    plan.alignment = options.alignment;
    plan.mapped_from = window_from;
    plan.arena_bytes = window_from + w.arena_bytes;
    plan.lower_bound = live_bytes_lower_bound(profile, options.alignment);
    return result;
}

uint64_t mapped_min_feasible_budget(const Profile& profile, const PlannerOptions& options)
{
    Part arena, window;
    split(profile, arena, window);
    uint64_t window_from = 0;
    if (!plan_arena(arena, options, window_from).status.ok())
        return 0;
    const uint64_t window_min = min_feasible_budget(window.profile, unmapped(options, page_alignment(options)));
    return window_min ? window_from + window_min : 0;
}

} // namespace flexnn
