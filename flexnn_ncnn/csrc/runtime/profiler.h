#ifndef FLEXNN_PROFILER_H
#define FLEXNN_PROFILER_H

#include "planner/profile.h"
#include "runtime/fault_injector.h"
#include "runtime/layer_schedule.h"
#include "runtime/runtime_options.h"
#include "runtime/status.h"
#include "runtime/stock_run.h"

#include <string>
#include <vector>

namespace flexnn {

struct PrepareResult
{
    LayerSchedule schedule;
    Profile profile;        // steps as in LayerSchedule
    NamedMats outputs;      // what the profiled inference computed
    uint64_t outside_bytes = 0; // peak bytes no step could own (requests from OpenMP workers)
};

// Prepare (on the target): load every layer once in .bin order, recording each one's byte range,
// flags, load time and the buffers it allocates; then one sequential inference recording every
// buffer's (step, role, ordinal, size, last use) and each layer's compute time.
// With a transformed_path, the weights each layer derives in create_pipeline are written there
// first (an inference with the layers built the stock way gives the reference outputs), and the
// recorded loads and inference are those of layers built from that file; the two inferences must
// agree. "" prepares layers that transform their raw weights on every load.
Status prepare(const std::string& param_path, const std::string& bin_path, const std::string& transformed_path,
               const NamedMats& inputs, const std::vector<std::string>& output_names, const RuntimeOptions& options,
               PrepareResult& result, FaultInjector* faults = nullptr);

} // namespace flexnn

#endif // FLEXNN_PROFILER_H
