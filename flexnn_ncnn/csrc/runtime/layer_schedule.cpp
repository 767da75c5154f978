#include "runtime/layer_schedule.h"

namespace flexnn {

std::vector<std::string> LayerSchedule::step_names(const Model& model) const
{
    std::vector<std::string> names;
    names.push_back("step 0 (inputs)");
    for (size_t s = 1; s <= order.size(); s++)
        names.push_back("step " + std::to_string(s) + " (layer " + model.layer_name(order[s - 1]) + ")");
    names.push_back("step " + std::to_string(output_step()) + " (outputs)");
    return names;
}

Status LayerSchedule::validate(const Model& model) const
{
    const int layers = model.layer_count();
    if ((int)ranges.size() != layers || (int)flags.size() != layers)
        return Status::error("schedule: " + std::to_string(ranges.size()) + " layer ranges for a model of " + std::to_string(layers) + " layers");
    std::vector<bool> seen(layers, false);
    for (int layer : order)
    {
        if (layer < 0 || layer >= layers || !model.planned(layer) || seen[layer])
            return Status::error("schedule: execution order names layer " + std::to_string(layer) + ", which cannot compute here");
        seen[layer] = true;
    }
    if (inputs.empty() || outputs.empty())
        return Status::error("schedule: no input or no output blob");
    for (const ByteRange& r : ranges)
        if (r.end < r.begin)
            return Status::error("schedule: a layer's byte range ends before it begins");
    return Status();
}

} // namespace flexnn
