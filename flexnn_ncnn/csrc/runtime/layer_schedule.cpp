#include "runtime/layer_schedule.h"

namespace flexnn {

std::string LayerSchedule::step_name(int step, const Model& model) const
{
    if (step == 0)
        return "step 0 (inputs)";
    if (step == output_step())
        return "step " + std::to_string(step) + " (outputs)";
    if (step < 0 || step > output_step())
        return "step " + std::to_string(step);
    return "step " + std::to_string(step) + " (layer " + model.layer_name(order[step - 1]) + ")";
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
    if (input_uses.size() != inputs.size())
        return Status::error("schedule: " + std::to_string(input_uses.size()) + " input uses for " + std::to_string(inputs.size()) + " inputs");
    for (const InputUse& use : input_uses)
        if (use.last_use > output_step() || (use.in_place() != (use.bytes > 0)))
            return Status::error("schedule: an input read in place until step " + std::to_string(use.last_use) + " of "
                                 + std::to_string(output_step()) + " with " + std::to_string(use.bytes) + " B");
    for (const ByteRange& r : ranges)
        if (r.end < r.begin)
            return Status::error("schedule: a layer's byte range ends before it begins");
    return Status();
}

} // namespace flexnn
