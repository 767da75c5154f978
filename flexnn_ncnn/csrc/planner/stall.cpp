#include "planner/stall.h"

#include <algorithm>

namespace flexnn {

double expected_stall_us(const Profile& profile, const Plan& plan)
{
    const size_t layer_count = profile.layers.size();
    std::vector<double> weight_bytes(layer_count, 0), loaded_bytes(layer_count, 0);
    for (size_t i = 0; i < profile.tensors.size(); i++)
    {
        const TensorUse& t = profile.tensors[i];
        if (t.role != Role::Weight)
            continue;
        weight_bytes[t.layer] += static_cast<double>(t.size);
        if (!plan.tensors[i].pinned)
            loaded_bytes[t.layer] += static_cast<double>(t.size);
    }
    std::vector<int> waits_for(layer_count, -1);
    for (const Dependency& d : plan.dependencies)
        waits_for[d.load] = std::max(waits_for[d.load], d.comp);

    std::vector<double> comp_end(layer_count, 0);
    double loader_free = 0, previous_end = 0, stall = 0;
    for (size_t j = 0; j < layer_count; j++)
    {
        double loaded = 0;
        if (loaded_bytes[j] > 0)
        {
            const double ready = waits_for[j] < 0 ? 0 : comp_end[waits_for[j]];
            loaded = std::max(loader_free, ready) + profile.layers[j].load_us * loaded_bytes[j] / weight_bytes[j];
            loader_free = loaded;
        }
        const double start = std::max(previous_end, loaded);
        stall += start - previous_end;
        comp_end[j] = previous_end = start + profile.layers[j].compute_us;
    }
    return stall;
}

} // namespace flexnn
