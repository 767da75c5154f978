#include "planner/record_pages.h"

#include <algorithm>
#include <numeric>

namespace flexnn {

namespace {

struct Span
{
    uint64_t lo, hi; // planned bytes
    int begin, end;  // steps [begin, end) the tensor holds them
};

Span span_of(const TensorUse& t, const Placement& p, const Plan& plan, int steps)
{
    const int begin = p.pinned ? 0 : t.role == Role::Weight ? p.load_after + 1 : t.first_use;
    const int end = p.pinned ? steps : t.last_use + 1;
    return {p.offset, p.offset + planned_bytes(t, plan.mapped, plan.alignment), begin, end};
}

// `uncovered` without [lo, hi); the pieces taken out are appended to `taken`
void take(ByteRanges& uncovered, uint64_t lo, uint64_t hi, ByteRanges* taken)
{
    ByteRanges kept;
    for (const auto& r : uncovered)
    {
        const uint64_t a = r.first, b = r.first + r.second;
        if (hi <= a || b <= lo)
        {
            kept.push_back(r);
            continue;
        }
        if (a < lo)
            kept.emplace_back(a, lo - a);
        if (hi < b)
            kept.emplace_back(hi, b - hi);
        if (taken)
            taken->emplace_back(std::max(a, lo), std::min(b, hi) - std::max(a, lo));
    }
    uncovered.swap(kept);
}

} // namespace

std::vector<ByteRanges> pages_to_give_back(const Profile& profile, const Plan& plan)
{
    const size_t n = profile.tensors.size();
    std::vector<ByteRanges> give_back(n);
    if (!plan.mapped)
        return give_back;
    const int steps = static_cast<int>(profile.layers.size());
    std::vector<Span> spans(n);
    uint64_t widest = 0;
    for (size_t i = 0; i < n; i++)
    {
        spans[i] = span_of(profile.tensors[i], plan.tensors[i], plan, steps);
        widest = std::max(widest, spans[i].hi - spans[i].lo);
    }
    std::vector<size_t> by_offset(n);
    std::iota(by_offset.begin(), by_offset.end(), 0);
    std::sort(by_offset.begin(), by_offset.end(), [&spans](size_t a, size_t b) { return spans[a].lo < spans[b].lo; });

    for (size_t r = 0; r < n; r++)
    {
        if (!profile.tensors[r].transformed || plan.tensors[r].pinned)
            continue;
        const Span& record = spans[r];
        // the tensors over any of its bytes, nearest tenant first
        std::vector<std::pair<int, size_t> > tenants; // (steps after the record ends, tensor)
        const uint64_t from = record.lo > widest ? record.lo - widest : 0;
        auto it = std::lower_bound(by_offset.begin(), by_offset.end(), from, [&spans](size_t i, uint64_t v) { return spans[i].lo < v; });
        for (; it != by_offset.end() && spans[*it].lo < record.hi; ++it)
            if (*it != r && spans[*it].hi > record.lo)
                tenants.emplace_back(((spans[*it].begin - record.end) % steps + steps) % steps, *it);
        std::sort(tenants.begin(), tenants.end());
        ByteRanges uncovered{{record.lo, record.hi - record.lo}};
        for (const auto& tenant : tenants)
        {
            if (uncovered.empty())
                break;
            const Span& s = spans[tenant.second];
            if (profile.tensors[tenant.second].transformed)
                take(uncovered, s.lo, s.hi, nullptr); // records lie on whole pages
            else
                take(uncovered, s.lo / kMappedPage * kMappedPage, align_up(s.hi, kMappedPage), &give_back[r]);
        }
        std::sort(give_back[r].begin(), give_back[r].end());
    }
    return give_back;
}

} // namespace flexnn
