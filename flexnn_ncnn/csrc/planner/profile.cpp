#include "planner/profile.h"

#include "planner/plan.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace flexnn {

namespace {

// keeps every sum of aligned sizes far from uint64 overflow
constexpr uint64_t kMaxTensorBytes = uint64_t(1) << 48;

} // namespace

const char* role_name(Role role)
{
    switch (role)
    {
    case Role::Weight:
        return "weight";
    case Role::Activation:
        return "activation";
    case Role::Intermediate:
        return "intermediate";
    }
    return "unknown";
}

std::string tensor_name(const TensorUse& tensor)
{
    return "layer " + std::to_string(tensor.layer) + " " + role_name(tensor.role) + " " + std::to_string(tensor.ordinal);
}

uint64_t align_up(uint64_t size, uint64_t alignment)
{
    return (size + alignment - 1) / alignment * alignment;
}

std::pair<int, int> request_interval(const TensorUse& t)
{
    const int end = std::numeric_limits<int>::max();
    if (t.role != Role::Intermediate)
        return {0, end};
    return {t.ordinal, t.released_before < 0 ? end : t.released_before};
}

bool has_transformed(const Profile& profile)
{
    return std::any_of(profile.tensors.begin(), profile.tensors.end(), [](const TensorUse& t) { return t.transformed; });
}

uint64_t planned_alignment(const TensorUse& t, bool mapped, uint64_t alignment)
{
    return mapped && t.transformed ? align_up(kMappedPage, alignment) : alignment;
}

uint64_t planned_bytes(const TensorUse& t, bool mapped, uint64_t alignment)
{
    const uint64_t size = mapped && t.transformed ? align_up(t.size, kMappedPage) + kMappedPage : t.size;
    return align_up(size, planned_alignment(t, mapped, alignment));
}

Status validate_profile(const Profile& profile)
{
    const int layer_count = static_cast<int>(profile.layers.size());
    if (profile.tensors.empty())
        return Status::error("profile: no tensors");
    for (size_t l = 0; l < profile.layers.size(); l++)
    {
        const LayerCost& c = profile.layers[l];
        if (!(c.load_us >= 0) || !(c.compute_us >= 0))
            return Status::error("profile: layer " + std::to_string(l) + " has a negative or NaN load or compute time");
    }
    std::set<std::tuple<int, int, int> > seen;
    for (const TensorUse& t : profile.tensors)
    {
        const std::string name = "profile: " + tensor_name(t);
        if (t.role != Role::Weight && t.role != Role::Activation && t.role != Role::Intermediate)
            return Status::error(name + " has an unknown role");
        if (t.layer < 0 || t.layer >= layer_count)
            return Status::error(name + ": layer out of range (the profile has " + std::to_string(layer_count) + " layers)");
        if (t.ordinal < 0)
            return Status::error(name + ": negative ordinal");
        if (t.size == 0 || t.size > kMaxTensorBytes)
            return Status::error(name + ": size " + std::to_string(t.size) + " B is not in [1, 2^48]");
        if (t.first_use != t.layer)
            return Status::error(name + ": first use " + std::to_string(t.first_use) + " is not its own layer");
        if (t.last_use < t.first_use || t.last_use >= layer_count)
            return Status::error(name + ": last use " + std::to_string(t.last_use) + " is before its first use or past the last layer");
        if (t.transformed && t.role != Role::Weight)
            return Status::error(name + " is marked transformed, but only weights can be");
        if (t.role == Role::Intermediate && t.last_use != t.layer)
            return Status::error(name + ": an intermediate must die with its layer");
        if (t.released_before != -1 && (t.role != Role::Intermediate || t.released_before <= t.ordinal))
            return Status::error(name + ": released before request " + std::to_string(t.released_before) +
                                 ", but only an intermediate can be released within its step, after its own request");
        if (!seen.emplace(t.layer, static_cast<int>(t.role), t.ordinal).second)
            return Status::error(name + " appears twice");
    }
    return Status();
}

uint64_t live_bytes_lower_bound(const Profile& profile, uint64_t alignment)
{
    // per step, the most of its intermediates live at one request: a difference map over requests
    std::vector<std::map<int, int64_t> > requests(profile.layers.size());
    for (const TensorUse& t : profile.tensors)
    {
        if (t.role != Role::Intermediate)
            continue;
        const int64_t size = static_cast<int64_t>(align_up(t.size, alignment));
        const std::pair<int, int> live = request_interval(t);
        requests[t.layer][live.first] += size;
        requests[t.layer][live.second] -= size;
    }
    // difference array over steps: +size at first_use, -size at last_use + 1
    std::vector<int64_t> delta(profile.layers.size() + 1, 0);
    for (size_t step = 0; step < requests.size(); step++)
    {
        int64_t live = 0, peak = 0;
        for (const auto& event : requests[step])
        {
            live += event.second;
            peak = std::max(peak, live);
        }
        delta[step] += peak;
        delta[step + 1] -= peak;
    }
    for (const TensorUse& t : profile.tensors)
    {
        if (t.role == Role::Intermediate)
            continue;
        const int64_t size = static_cast<int64_t>(align_up(t.size, alignment));
        delta[t.first_use] += size;
        delta[t.last_use + 1] -= size;
    }
    int64_t live = 0;
    int64_t peak = 0;
    for (int64_t d : delta)
    {
        live += d;
        peak = std::max(peak, live);
    }
    return static_cast<uint64_t>(peak);
}

} // namespace flexnn
