#ifndef FLEXNN_LAYER_SCHEDULE_H
#define FLEXNN_LAYER_SCHEDULE_H

#include "runtime/model.h"
#include "runtime/status.h"
#include "runtime/weight_reader.h"

#include <cstdint>
#include <string>
#include <vector>

namespace flexnn {

// How an input reaches NCNN: read in place from the caller's buffer (read_only_input.h), NCNN holding
// it from step 0 through last_use, or copied into the arena at step 0 (a tensor of the profile).
struct InputUse
{
    uint64_t bytes = 0; // read in place: the bytes NCNN reads (0 when copied)
    int last_use = -1;  // read in place: the last step NCNN holds it (-1 when copied)

    bool in_place() const
    {
        return last_use >= 0;
    }
};

// What prepare learns about a model's layers that the plan's time axis is built on. Steps: 0 feeds
// the inputs (copying those not read in place into the arena), 1..L compute order[0..L-1] (NCNN's
// depth-first order from the outputs), L+1 copies the outputs out.
struct LayerSchedule
{
    std::vector<std::string> inputs;  // blob names, fed in this order
    std::vector<InputUse> input_uses; // per input
    std::vector<std::string> outputs; // blob names, extracted in this order
    std::vector<int> order;           // layer index computed at step s is order[s - 1]
    std::vector<ByteRange> ranges;    // per layer index: its bytes in the .bin (empty when it has none)
    std::vector<uint32_t> flags;      // per layer index: layer_flags() after create_pipeline (0 for Input)

    int step_count() const
    {
        return (int)order.size() + 2;
    }
    int output_step() const
    {
        return (int)order.size() + 1;
    }
    // "step 3 (layer conv1)", "step 0 (inputs)": made when a message needs it, not kept per step
    std::string step_name(int step, const Model& model) const;
    // the schedule fits this model: layer indexes and ranges in bounds
    Status validate(const Model& model) const;
};

} // namespace flexnn

#endif // FLEXNN_LAYER_SCHEDULE_H
