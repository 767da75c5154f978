#include "planner/check_plan.h"

#include <algorithm>
#include <numeric>

namespace flexnn {

namespace {

struct Rect
{
    uint64_t lo, hi;                // bytes [lo, hi)
    int begin, end;                 // steps [begin, end)
    std::pair<int, int> requests;   // request_interval: within one step, only intermediates are apart
};

std::string bytes(uint64_t lo, uint64_t hi)
{
    return "bytes [" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
}

std::string steps(int begin, int end)
{
    return "steps [" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

Status check_placement(const TensorUse& t, const Placement& p, const Plan& plan)
{
    const std::string name = tensor_name(t);
    const uint64_t size = planned_bytes(t, plan.mapped, plan.alignment);
    const uint64_t align = planned_alignment(t, plan.mapped, plan.alignment);
    if (p.offset % align != 0)
        return Status::error(name + " at offset " + std::to_string(p.offset) + " is not aligned to " + std::to_string(align) + " B");
    if (p.offset > plan.arena_bytes || size > plan.arena_bytes - p.offset)
        return Status::error(name + " at " + bytes(p.offset, p.offset + size) + " lies outside the arena of " + std::to_string(plan.arena_bytes) + " B");
    if (t.role != Role::Weight)
    {
        if (p.pinned)
            return Status::error(name + " is pinned, but only weights can be");
        if (p.load_after != t.first_use - 1)
            return Status::error(name + " is claimed after comp(" + std::to_string(p.load_after) + "), not at its first use " + std::to_string(t.first_use));
        return Status();
    }
    if (p.pinned && p.load_after != -1)
        return Status::error(name + " is pinned but loads after comp(" + std::to_string(p.load_after) + ")");
    if (p.load_after < -1)
        return Status::error(name + " loads after comp(" + std::to_string(p.load_after) + "), before the inference starts");
    if (p.load_after >= t.first_use)
        return Status::error(name + " loads after comp(" + std::to_string(p.load_after) + "), too late for its first use by layer " + std::to_string(t.first_use));
    return Status();
}

} // namespace

Status check_plan(const Profile& profile, const Plan& plan)
{
    Status s = validate_profile(profile);
    if (!s.ok())
        return s;
    const int layer_count = static_cast<int>(profile.layers.size());
    const size_t n = profile.tensors.size();
    if (plan.tensors.size() != n)
        return Status::error("the plan places " + std::to_string(plan.tensors.size()) + " tensors, the profile has " + std::to_string(n));
    if (plan.alignment == 0)
        return Status::error("the plan's alignment is 0");
    if (plan.arena_bytes > plan.budget)
        return Status::error("the arena (" + std::to_string(plan.arena_bytes) + " B) exceeds the budget (" + std::to_string(plan.budget) + " B)");

    std::vector<Rect> rects(n);
    std::vector<int> load_time(layer_count, -2); // -2: no non-pinned weight seen yet
    for (size_t i = 0; i < n; i++)
    {
        const TensorUse& t = profile.tensors[i];
        const Placement& p = plan.tensors[i];
        s = check_placement(t, p, plan);
        if (!s.ok())
            return s;
        rects[i] = {p.offset, p.offset + planned_bytes(t, plan.mapped, plan.alignment), p.pinned ? 0 : p.load_after + 1, p.pinned ? layer_count : t.last_use + 1,
                    request_interval(t)};
        if (t.role == Role::Weight && !p.pinned)
        {
            if (load_time[t.layer] != -2 && load_time[t.layer] != p.load_after)
                return Status::error(tensor_name(t) + " loads after comp(" + std::to_string(p.load_after) + "), another weight of its layer after comp(" +
                                     std::to_string(load_time[t.layer]) + ")");
            load_time[t.layer] = p.load_after;
        }
    }

    // overlap: sweep tensors in address order against those that started below their end
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&rects](int a, int b) { return rects[a].lo != rects[b].lo ? rects[a].lo < rects[b].lo : a < b; });
    for (size_t a = 0; a < n; a++)
    {
        const Rect& x = rects[order[a]];
        for (size_t b = a + 1; b < n && rects[order[b]].lo < x.hi; b++)
        {
            const Rect& y = rects[order[b]];
            if (x.begin < y.end && y.begin < x.end && x.requests.first < y.requests.second && y.requests.first < x.requests.second)
            {
                return Status::error(tensor_name(profile.tensors[order[a]]) + " and " + tensor_name(profile.tensors[order[b]]) + " share " +
                                     bytes(y.lo, std::min(x.hi, y.hi)) + " during " + steps(std::max(x.begin, y.begin), std::min(x.end, y.end)));
            }
        }
    }

    std::vector<int> waits_for(layer_count, -1);
    for (const Dependency& d : plan.dependencies)
    {
        if (d.load < 0 || d.load >= layer_count || d.comp < 0 || d.comp >= d.load)
            return Status::error("dependency comp(" + std::to_string(d.comp) + ") -> load(" + std::to_string(d.load) + ") is out of order or out of range");
        waits_for[d.load] = std::max(waits_for[d.load], d.comp);
    }
    for (size_t w = 0; w < n; w++)
    {
        const TensorUse& tw = profile.tensors[w];
        if (tw.role != Role::Weight || plan.tensors[w].pinned)
            continue;
        for (size_t x = 0; x < n; x++)
        {
            const Rect &rw = rects[w], &rx = rects[x];
            const int last_use = profile.tensors[x].last_use;
            if (rx.end <= rw.begin && rx.lo < rw.hi && rw.lo < rx.hi && waits_for[tw.layer] < last_use)
            {
                return Status::error("load(" + std::to_string(tw.layer) + ") of " + tensor_name(tw) + " may overwrite " + tensor_name(profile.tensors[x]) +
                                     " while comp(" + std::to_string(last_use) + ") still uses it: no dependency comp(" + std::to_string(last_use) + ") -> load(" +
                                     std::to_string(tw.layer) + ")");
            }
        }
    }
    return Status();
}

} // namespace flexnn
