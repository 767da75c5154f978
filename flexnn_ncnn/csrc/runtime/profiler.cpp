#include "runtime/profiler.h"

#include "runtime/model.h"
#include "runtime/recording_allocator.h"
#include "runtime/thread_allocator_scope.h"
#include "runtime/weight_reader.h"

#include <chrono>
#include <limits>

namespace flexnn {

namespace {

double now_us()
{
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Records the execution order and each layer's compute time while the clock follows the steps.
class RecordingHooks : public ComputeHooks
{
public:
    explicit RecordingHooks(StepClock& clock)
        : clock_(clock)
    {
    }
    int before_compute(int layer_index) override
    {
        order.push_back(layer_index);
        clock_.begin((int)order.size());
        started_us_ = now_us();
        return 0;
    }
    int after_compute(int, int ret) override
    {
        compute_us.push_back(now_us() - started_us_);
        clock_.end();
        return ret;
    }

    std::vector<int> order;
    std::vector<double> compute_us; // parallel to order

private:
    StepClock& clock_;
    double started_us_ = 0;
};

bool has_blob(const ncnn::Net& net, const std::string& name)
{
    for (const ncnn::Blob& blob : net.blobs())
        if (blob.name == name)
            return true;
    return false;
}

} // namespace

Status prepare(const std::string& param_path, const std::string& bin_path, const NamedMats& inputs,
               const std::vector<std::string>& output_names, const RuntimeOptions& options, PrepareResult& result)
{
    // declared before the model: its layers release their buffers into these
    CountingAllocator outside;
    StepClock load_clock;
    StepClock clock;
    RecordingAllocator weights(Role::Weight, load_clock, outside);
    RecordingAllocator blobs(Role::Activation, clock, outside);
    RecordingAllocator workspace(Role::Intermediate, clock, outside);
    RecordingHooks hooks(clock);

    Model model;
    Status s = model.open(param_path, bin_path, options.ncnn_option(), &hooks, false);
    if (!s.ok())
        return s;
    const int layer_count = model.layer_count();
    for (const auto& input : inputs)
        if (!has_blob(model.net(), input.first))
            return Status::error("model has no input blob '" + input.first + "'");
    for (const std::string& name : output_names)
        if (!has_blob(model.net(), name))
            return Status::error("model has no output blob '" + name + "'");

    // every layer once, in .bin order: byte ranges, flags, load times, weight buffers
    LayerSchedule& schedule = result.schedule;
    schedule.ranges.assign(layer_count, ByteRange());
    schedule.flags.assign(layer_count, 0u);
    std::vector<double> load_us(layer_count, 0.0);
    ncnn::Option load_opt = model.options();
    load_opt.blob_allocator = nullptr; // whatever create_pipeline allocates is the layer's: see ThreadAllocatorScope
    load_opt.workspace_allocator = nullptr;
    uint64_t position = 0;
    for (int i = 0; i < layer_count; i++)
    {
        PlannedLayer* layer = model.planned(i);
        if (!layer)
            continue;
        WeightReader reader(model.weights(), {position, std::numeric_limits<uint64_t>::max()});
        load_clock.begin(i);
        const double t0 = now_us();
        {
            ThreadAllocatorScope scope(&weights);
            s = layer->load(reader, load_opt);
        }
        load_us[i] = now_us() - t0;
        if (!s.ok())
            return Status::error(reader.error().empty() ? s.message() : "layer " + model.layer_name(i) + ": " + reader.error());
        schedule.ranges[i] = {position, reader.position()};
        position = reader.position();
        schedule.flags[i] = layer->loaded_flags();
        layer->set_flags(schedule.flags[i]);
    }

    // one sequential inference
    clock.reset();
    std::vector<ncnn::Mat> features;
    double input_us = 0, output_us = 0;
    {
        ncnn::Extractor ex = model.net().create_extractor();
        ex.set_blob_allocator(&blobs);
        ex.set_workspace_allocator(&workspace);
        {
            ThreadAllocatorScope scope(&blobs);
            clock.begin(0);
            double t0 = now_us();
            for (const auto& input : inputs)
            {
                schedule.inputs.push_back(input.first);
                ncnn::Mat in_arena = input.second.clone(&blobs);
                ex.input(input.first.c_str(), in_arena);
            }
            input_us = now_us() - t0;
            clock.end();
            for (const std::string& name : output_names)
            {
                ncnn::Mat feature;
                if (ex.extract(name.c_str(), feature) != 0)
                    return Status::error("NCNN failed to compute output '" + name + "'");
                schedule.outputs.push_back(name);
                features.push_back(feature);
            }
        }
        clock.begin((int)hooks.order.size() + 1);
        double t0 = now_us();
        result.outputs.clear();
        for (size_t k = 0; k < features.size(); k++)
            result.outputs.emplace_back(output_names[k], features[k].clone()); // plain heap: the caller's
        features.clear();
        ex.clear();
        output_us = now_us() - t0;
        clock.end();
    }
    schedule.order = hooks.order;

    // the profile, on the schedule's steps
    std::vector<int> step_of(layer_count, -1);
    for (size_t k = 0; k < schedule.order.size(); k++)
        step_of[schedule.order[k]] = (int)k + 1;
    const int last_step = schedule.output_step();
    Profile& profile = result.profile;
    profile.layers.assign(schedule.step_count(), LayerCost{0.0, 0.0});
    profile.layers[0].compute_us = input_us;
    profile.layers[last_step].compute_us = output_us;
    for (size_t k = 0; k < schedule.order.size(); k++)
        profile.layers[k + 1] = {load_us[schedule.order[k]], hooks.compute_us[k]};

    profile.tensors.clear();
    for (const AllocationRecord& r : weights.records())
    {
        const int step = step_of[r.step];
        if (step >= 0) // layers the outputs do not need are never loaded
            profile.tensors.push_back({step, Role::Weight, r.ordinal, r.size, step, step});
    }
    for (const RecordingAllocator* allocator : {&blobs, &workspace})
    {
        for (const AllocationRecord& r : allocator->records())
        {
            const int last_use = r.last_use < 0 ? last_step : r.last_use;
            if (r.role == Role::Intermediate && last_use != r.step)
            {
                return Status::error("step " + std::to_string(r.step) + ": a workspace buffer outlives its layer "
                                     "(released at step " + std::to_string(last_use) + "): cannot plan it as an intermediate");
            }
            profile.tensors.push_back({r.step, r.role, r.ordinal, r.size, r.step, last_use});
        }
    }
    result.outside_bytes = outside.counts().peak_bytes;
    s = validate_profile(profile);
    if (!s.ok())
        return Status::error("prepare recorded an invalid profile: " + s.message());
    return schedule.validate(model);
}

} // namespace flexnn
