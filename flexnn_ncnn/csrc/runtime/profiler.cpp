#include "runtime/profiler.h"

#include "runtime/model.h"
#include "runtime/pattern_allocator.h"
#include "runtime/read_only_input.h"
#include "runtime/recording_allocator.h"
#include "runtime/thread_allocator_scope.h"
#include "runtime/transformed_weights.h"
#include "runtime/weight_reader.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>

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
        // NCNN drops a blob right after its last consumer computed: held here, held by this step
        for (size_t k = 0; k < in_place.size(); k++)
            if (in_place[k] && in_place[k]->held())
                last_held[k] = (int)order.size();
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
    // per input: its in-place reader (null: copied into the arena), and the last step it was held at
    std::vector<ReadOnlyInput*> in_place;
    std::vector<int> last_held;

private:
    StepClock& clock_;
    double started_us_ = 0;
};

// NCNN's ModelBin over a WeightReader that remembers what each load call returned
class RecordingModelBin : public ncnn::ModelBin
{
public:
    explicit RecordingModelBin(WeightReader& reader)
        : reader_(reader), raw_(reader)
    {
    }
    ncnn::Mat load(int w, int type) const override
    {
        ncnn::Mat m = raw_.load(w, type);
        calls.push_back({m.data, reader_.position(), (uint32_t)m.elemsize, (uint64_t)w * m.elemsize, type});
        return m;
    }

    struct Call
    {
        const void* data;
        uint64_t end;
        uint32_t elemsize;
        uint64_t bytes;
        int type; // ModelBin::load's: 0 a tagged weight record, 1 raw fp32 (biases, scales), ...
    };
    mutable std::vector<Call> calls;

private:
    WeightReader& reader_;
    const ncnn::ModelBinFromDataReader raw_;
};

// Build every layer the stock way from `heap`, each one's derived weights going to `writer`, and
// mark the raw weights a layer with transformed ones no longer holds once built (heap no longer owns
// them): those are never read when the layer is built from the file. Only tagged weight records
// (load type 0) are: what a layer derives from its raw fp32 records (int8 scales widened per group in
// load_model) is not in the file, so those are always read.
Status record_transforms(Model& model, const ncnn::Option& load_opt, CountingAllocator& heap, TransformedWeightsWriter& writer,
                         std::vector<ByteRange>& ranges)
{
    uint64_t position = 0;
    for (int i = 0; i < model.layer_count(); i++)
    {
        PlannedLayer* layer = model.planned(i);
        if (!layer)
            continue;
        WeightReader reader(model.weights(), {position, std::numeric_limits<uint64_t>::max()});
        RecordingModelBin mb(reader);
        writer.begin_layer(i);
        Status s;
        {
            ThreadAllocatorScope scope(&heap);
            s = layer->load(mb, load_opt, &writer);
        }
        if (!reader.error().empty())
            return Status::error("layer " + layer->name + ": " + reader.error());
        if (!s.ok())
            return s;
        if (!writer.status().ok())
            return writer.status();
        ranges[i] = {position, reader.position()};
        position = reader.position();
        layer->set_flags(layer->loaded_flags());
        if (!writer.current())
            continue;
        std::vector<SkippedLoad> skipped;
        for (size_t k = 0; k < mb.calls.size(); k++)
        {
            const RecordingModelBin::Call& call = mb.calls[k];
            if (call.type == 0 && call.data && !heap.owns(const_cast<void*>(call.data)))
                skipped.push_back({(int)k, call.end, call.elemsize, call.bytes});
        }
        writer.set_skipped(std::move(skipped));
    }
    return Status();
}

// One inference with every buffer, the inputs' copies too, from `heap`, not recorded: the hooks and
// clock start afresh after it.
Status run_unrecorded(Model& model, const NamedMats& inputs, const std::vector<std::string>& output_names,
                      ncnn::Allocator& heap, RecordingHooks& hooks, StepClock& clock, NamedMats& outputs)
{
    Status s;
    {
        ThreadAllocatorScope scope(&heap);
        ncnn::Extractor ex = model.net().create_extractor();
        ex.set_blob_allocator(&heap);
        ex.set_workspace_allocator(&heap);
        for (size_t k = 0; k < inputs.size() && s.ok(); k++)
        {
            ncnn::Mat copy = inputs[k].second.clone(&heap);
            if (copy.empty() && !inputs[k].second.empty())
                s = Status::error("cannot copy input '" + inputs[k].first + "'");
            else
                ex.input(inputs[k].first.c_str(), copy);
        }
        for (size_t k = 0; k < output_names.size() && s.ok(); k++)
        {
            ncnn::Mat feature;
            if (ex.extract(output_names[k].c_str(), feature) != 0)
                s = Status::error("NCNN failed to compute output '" + output_names[k] + "'");
            else
                outputs.emplace_back(output_names[k], feature.clone());
        }
    }
    // whatever the run ended by: the slots of value-dependent layers are `heap`'s
    model.release_bounded_tops();
    hooks.order.clear();
    hooks.compute_us.clear();
    clock.reset();
    return s;
}

// ok when every output of `b` equals `a`'s (same kernels on the same weights: bit for bit, up to
// a margin far below any weight error)
Status compare_outputs(const NamedMats& a, const NamedMats& b)
{
    for (size_t k = 0; k < a.size() && k < b.size(); k++)
    {
        const ncnn::Mat& x = a[k].second;
        const ncnn::Mat& y = b[k].second;
        if (x.w != y.w || x.h != y.h || x.d != y.d || x.c != y.c || x.elemsize != y.elemsize || x.elempack != y.elempack)
            return Status::error("output " + a[k].first + " has another shape");
        float largest = 0, diff = 0;
        for (int q = 0; q < x.c; q++)
        {
            const float* p = x.channel(q);
            const float* r = y.channel(q);
            for (size_t i = 0; i < (size_t)x.w * x.h * x.d * x.elempack; i++)
            {
                if (!std::isfinite(p[i]) || !std::isfinite(r[i]))
                {
                    // a NaN equals only a NaN, an infinity only the same infinity
                    if (!(std::isnan(p[i]) && std::isnan(r[i])) && p[i] != r[i])
                        return Status::error("output " + a[k].first + " has " + std::to_string(r[i]) + " where the other has "
                                             + std::to_string(p[i]));
                    continue;
                }
                largest = std::max(largest, std::fabs(p[i]));
                diff = std::max(diff, std::fabs(p[i] - r[i]));
            }
        }
        if (!(diff <= 1e-5f * std::max(largest, 1.f)))
            return Status::error("output " + a[k].first + " differs by " + std::to_string(diff));
    }
    return Status();
}

// run_unrecorded twice, every buffer from `first`, then from `second` (heaps of other patterns, which
// outlive the model and `outputs`): NCNN's kernels give the same input the same output, so a model
// whose two runs differ reads memory no blob or weight of it holds (a layer given a blob of another
// rank than it indexes, as some exporters write); a read past a blob, or before it, reads its heap's
// pattern, so the runs differ whatever the heap held before. `outputs` is the first run's.
Status run_reproducible(Model& model, const NamedMats& inputs, const std::vector<std::string>& output_names,
                        PatternAllocator& first, PatternAllocator& second, RecordingHooks& hooks, StepClock& clock,
                        NamedMats& outputs)
{
    NamedMats again;
    Status s = run_unrecorded(model, inputs, output_names, first, hooks, clock, outputs);
    if (!s.ok())
        return s;
    s = run_unrecorded(model, inputs, output_names, second, hooks, clock, again);
    if (!s.ok())
        return s;
    s = compare_outputs(outputs, again);
    if (!s.ok())
        return Status::error("NCNN gives the same input two different results (" + s.message()
                             + "): a layer reads memory the model does not hold, so NCNN cannot run the model as"
                               " written; re-export it");
    return Status();
}

bool has_blob(const ncnn::Net& net, const std::string& name)
{
    for (const ncnn::Blob& blob : net.blobs())
        if (blob.name == name)
            return true;
    return false;
}

// prepare's body; whatever it throws, prepare turns into an error
Status prepare_recorded(const std::string& param_path, const std::string& bin_path, const std::string& transformed_path,
                        const NamedMats& inputs, const std::vector<std::string>& output_names, const RuntimeOptions& options,
                        PrepareResult& result, FaultInjector* faults)
{
    // declared before the model: its layers release their buffers into these
    CountingAllocator stock_heap; // layers built the stock way, to record their transformed weights
    CountingAllocator outside;
    StepClock load_clock;
    StepClock clock;
    RecordingAllocator weights(Role::Weight, load_clock, outside, faults);
    RecordingAllocator blobs(Role::Activation, clock, outside, faults);
    RecordingAllocator workspace(Role::Intermediate, clock, outside, faults);
    RecordingHooks hooks(clock);
    PatternAllocator ones(0x3f800000u), minus_threes(0xc0400000u); // 1.0f and -3.0f: run_reproducible

    Model model;
    Status s = model.open(param_path, bin_path, options.ncnn_option(), &hooks, false);
    if (!s.ok())
        return s;
    const int layer_count = model.layer_count();
    for (const auto& input : inputs)
    {
        if (!has_blob(model.net(), input.first))
            return Status::error("model has no input blob '" + input.first + "'");
        s = model.check_input(input.first, input.second);
        if (!s.ok())
            return s;
    }
    for (const std::string& name : output_names)
        if (!has_blob(model.net(), name))
            return Status::error("model has no output blob '" + name + "'");

    // every layer once, in .bin order: byte ranges, flags, load times, weight buffers; with a
    // transformed-weights file, first built the stock way to record what create_pipeline derives
    LayerSchedule& schedule = result.schedule;
    schedule.ranges.assign(layer_count, ByteRange());
    schedule.flags.assign(layer_count, 0u);
    std::vector<double> load_us(layer_count, 0.0);
    ncnn::Option load_opt = model.options();
    load_opt.blob_allocator = nullptr; // whatever create_pipeline allocates is the layer's: see ThreadAllocatorScope
    load_opt.workspace_allocator = nullptr;
    TransformedWeightsWriter writer;
    ZeroPages zeros;
    TransformedSource source;
    NamedMats stock_outputs;
    if (!transformed_path.empty())
    {
        s = writer.create(transformed_path, TransformKey::current(options));
        if (!s.ok())
            return s;
        s = record_transforms(model, load_opt, stock_heap, writer, schedule.ranges);
        if (!s.ok())
            return s;
        s = run_reproducible(model, inputs, output_names, ones, minus_threes, hooks, clock, stock_outputs);
        if (!s.ok())
            return s;
        s = zeros.map(writer.largest_skipped());
        if (!s.ok())
            return s;
        source = {writer.fd(), transformed_path, nullptr, &zeros, &weights, nullptr};
    }
    uint64_t position = 0;
    for (int i = 0; i < layer_count; i++)
    {
        PlannedLayer* layer = model.planned(i);
        if (!layer)
            continue;
        WeightReader reader(model.weights(), {position, std::numeric_limits<uint64_t>::max()});
        writer.begin_layer(i);
        load_clock.begin(i);
        const double t0 = now_us();
        {
            ThreadAllocatorScope scope(&weights);
            s = load_layer(*layer, reader, load_opt, writer.current(), source);
        }
        load_us[i] = now_us() - t0;
        if (!s.ok())
            return s;
        if (!transformed_path.empty() && schedule.ranges[i].end != reader.position())
            return Status::error("layer " + layer->name + " read other bytes with its transformed weights");
        schedule.ranges[i] = {position, reader.position()};
        position = reader.position();
        schedule.flags[i] = layer->loaded_flags();
        layer->set_flags(schedule.flags[i]);
    }
    if (transformed_path.empty())
    {
        NamedMats reproduced;
        s = run_reproducible(model, inputs, output_names, ones, minus_threes, hooks, clock, reproduced);
        if (!s.ok())
            return s;
    }

    // one sequential inference
    clock.reset();
    std::vector<std::unique_ptr<ReadOnlyInput> > in_place; // outlive the extractor holding their headers
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
                if (reads_in_place(input.second))
                {
                    in_place.push_back(std::make_unique<ReadOnlyInput>(input.second));
                    hooks.in_place.push_back(in_place.back().get());
                    ex.input(input.first.c_str(), in_place.back()->mat());
                }
                else
                {
                    hooks.in_place.push_back(nullptr);
                    ncnn::Mat in_arena = input.second.clone(&blobs);
                    ex.input(input.first.c_str(), in_arena);
                }
            }
            hooks.last_held.assign(inputs.size(), 0);
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
        for (size_t k = 0; k < inputs.size(); k++) // an output that is the input itself holds it to the end
            if (hooks.in_place[k] && hooks.in_place[k]->held())
                hooks.last_held[k] = (int)hooks.order.size() + 1;
        double t0 = now_us();
        result.outputs.clear();
        for (size_t k = 0; k < features.size(); k++)
            result.outputs.emplace_back(output_names[k], features[k].clone()); // plain heap: the caller's
        features.clear();
        ex.clear();
        model.release_bounded_tops();
        output_us = now_us() - t0;
        clock.end();
    }
    if (!transformed_path.empty())
    {
        s = compare_outputs(stock_outputs, result.outputs);
        if (!s.ok())
            return Status::error("pre-transformed weights change the output (" + s.message()
                                 + "): a layer reads weights it does not hand to its TransformedWeightStore");
        s = writer.finish();
        if (!s.ok())
            return s;
    }
    schedule.order = hooks.order;
    schedule.input_uses.clear();
    for (size_t k = 0; k < inputs.size(); k++)
    {
        const ncnn::Mat& m = inputs[k].second;
        if (hooks.in_place[k])
            schedule.input_uses.push_back({(uint64_t)m.total() * m.elemsize, hooks.last_held[k]});
        else
            schedule.input_uses.push_back(InputUse());
    }

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
            profile.tensors.push_back({step, r.ordinal, r.size, step, step, -1, Role::Weight, r.transformed});
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
            profile.tensors.push_back({r.step, r.ordinal, r.size, r.step, last_use, r.released_before, r.role, false});
        }
    }
    result.outside_bytes = outside.counts().peak_bytes;
    for (const RecordingAllocator* allocator : {&weights, &blobs, &workspace})
        if (allocator->failed())
            return Status::error(std::string("prepare: a ") + role_name(allocator->role()) + " buffer could not be allocated (injected fault)");
    s = validate_profile(profile);
    if (!s.ok())
        return Status::error("prepare recorded an invalid profile: " + s.message());
    return schedule.validate(model);
}

} // namespace

Status prepare(const std::string& param_path, const std::string& bin_path, const std::string& transformed_path,
               const NamedMats& inputs, const std::vector<std::string>& output_names, const RuntimeOptions& options,
               PrepareResult& result, FaultInjector* faults)
{
    if (faults)
        faults->begin_run();
    try
    {
        return prepare_recorded(param_path, bin_path, transformed_path, inputs, output_names, options, result, faults);
    }
    catch (const std::exception& e)
    {
        return Status::error(std::string("prepare threw: ") + e.what());
    }
}

} // namespace flexnn
