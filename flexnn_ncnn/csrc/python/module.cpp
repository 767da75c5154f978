// flexnn_ncnn._native: the runtime library, as Python sees it. Inputs and outputs are float32
// numpy arrays in NCNN's shape convention (see runtime/tensor.h); errors raise RuntimeError.
#include "planner/plan_dict.h"
#include "runtime/build_info.h"
#include "runtime/cpu_clusters.h"
#include "runtime/executor.h"
#include "runtime/heap_policy.h"
#include "runtime/mapped_net.h"
#include "runtime/profiler.h"
#include "runtime/stock_run.h"
#include "runtime/tensor.h"

#include <cpu.h>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <new>
#include <stdexcept>

namespace py = pybind11;

namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

void check(const flexnn::Status& s)
{
    if (!s.ok())
        throw std::runtime_error(s.one_line());
}

ncnn::Mat to_mat(const FloatArray& array)
{
    std::vector<int> shape(array.shape(), array.shape() + array.ndim());
    ncnn::Mat m;
    check(flexnn::mat_from_dense(shape, array.data(), m));
    return m;
}

FloatArray to_array(const ncnn::Mat& m)
{
    std::vector<int> shape;
    check(flexnn::dense_shape(m, shape));
    FloatArray array(std::vector<py::ssize_t>(shape.begin(), shape.end()));
    flexnn::copy_to_dense(m, array.mutable_data());
    return array;
}

py::dict counts_dict(const flexnn::AllocationCounts& c)
{
    py::dict d;
    d["current_bytes"] = c.current_bytes;
    d["peak_bytes"] = c.peak_bytes;
    d["total_bytes"] = c.total_bytes;
    d["allocations"] = c.allocations;
    d["largest_bytes"] = c.largest_bytes;
    return d;
}

py::tuple run_stock(const std::string& param, const std::string& bin, const std::map<std::string, FloatArray>& inputs,
                    const std::vector<std::string>& outputs, int threads, bool winograd, bool sgemm, bool packing,
                    bool count_weights, bool count_workspace)
{
    flexnn::NamedMats mats;
    for (const auto& kv : inputs)
        mats.emplace_back(kv.first, to_mat(kv.second));
    flexnn::StockRunOptions options;
    options.num_threads = threads;
    options.use_winograd = winograd;
    options.use_sgemm = sgemm;
    options.use_packing_layout = packing;
    options.count_weights = count_weights;
    options.count_workspace = count_workspace;
    flexnn::StockRunResult result;
    {
        py::gil_scoped_release unlocked;
        check(flexnn::run_stock(param, bin, mats, outputs, options, result));
    }
    py::dict out;
    for (const auto& kv : result.outputs)
        out[py::str(kv.first)] = to_array(kv.second);
    py::dict stats;
    stats["weights"] = counts_dict(result.weights);
    stats["weights_live_after_clear"] = result.weights_live_after_clear;
    stats["workspace"] = counts_dict(result.workspace);
    return py::make_tuple(out, stats);
}

using flexnn::plan_dict::planner_algorithm_from;
using flexnn::plan_dict::LayerRows;
using flexnn::plan_dict::TensorRows;

flexnn::RuntimeOptions runtime_options(int threads, bool packing, bool winograd, bool sgemm, bool fp16, const std::string& loader,
                                       bool drop_page_cache, bool overlap_loading = true, bool direct_io = false,
                                       bool static_arena = true)
{
    flexnn::RuntimeOptions o;
    o.num_threads = threads;
    o.use_packing_layout = packing;
    o.use_winograd = winograd;
    o.use_sgemm = sgemm;
    o.use_fp16 = fp16;
    o.drop_page_cache = drop_page_cache;
    o.overlap_loading = overlap_loading;
    o.direct_io = direct_io;
    o.static_arena = static_arena;
    if (!flexnn::loader_cores_from_name(loader, o.loader_cores))
        throw std::invalid_argument("loader must be any, little, middle, big or computing, not '" + loader + "'");
    return o;
}

flexnn::NamedMats named_mats(const py::dict& arrays)
{
    flexnn::NamedMats mats;
    for (const auto& kv : arrays)
        mats.emplace_back(kv.first.cast<std::string>(), to_mat(kv.second.cast<FloatArray>()));
    return mats;
}

// an output copied densely out of the arena during a run (without the GIL), for an array to own
struct DenseOutput
{
    std::string name;
    std::vector<int> shape;
    std::unique_ptr<float[]> data;
};

flexnn::Status take_dense(const std::string& name, const ncnn::Mat& output, std::vector<DenseOutput>& taken)
{
    DenseOutput t{name, {}, nullptr};
    flexnn::Status s = flexnn::dense_shape(output, t.shape);
    if (!s.ok())
        return s;
    size_t elements = 1;
    for (int d : t.shape)
        elements *= static_cast<size_t>(d);
    t.data.reset(new (std::nothrow) float[elements]);
    if (!t.data)
        return flexnn::Status::error("cannot allocate " + std::to_string(elements * sizeof(float)) + " B for output '" + name + "'");
    flexnn::copy_to_dense(output, t.data.get());
    taken.push_back(std::move(t));
    return flexnn::Status();
}

// the array over t's buffer, which it then owns
FloatArray owning_array(DenseOutput& t)
{
    py::capsule owner(t.data.get(), [](void* p) { delete[] static_cast<float*>(p); });
    float* data = t.data.release();
    return FloatArray(std::vector<py::ssize_t>(t.shape.begin(), t.shape.end()), data, owner);
}

py::dict arrays(const flexnn::NamedMats& mats)
{
    py::dict out;
    for (const auto& kv : mats)
        out[py::str(kv.first)] = to_array(kv.second);
    return out;
}

py::dict schedule_dict(const flexnn::LayerSchedule& s)
{
    std::vector<std::pair<uint64_t, uint64_t> > ranges;
    for (const auto& r : s.ranges)
        ranges.emplace_back(r.begin, r.end);
    py::dict d;
    d["inputs"] = s.inputs;
    std::vector<std::pair<uint64_t, int> > input_uses;
    for (const auto& use : s.input_uses)
        input_uses.emplace_back(use.bytes, use.last_use);
    d["input_uses"] = input_uses;
    d["outputs"] = s.outputs;
    d["order"] = s.order;
    d["ranges"] = ranges;
    d["flags"] = s.flags;
    return d;
}

flexnn::LayerSchedule schedule_from(const py::dict& d)
{
    flexnn::LayerSchedule s;
    s.inputs = d["inputs"].cast<std::vector<std::string> >();
    for (const auto& use : d["input_uses"].cast<std::vector<std::pair<uint64_t, int> > >())
        s.input_uses.push_back({use.first, use.second});
    s.outputs = d["outputs"].cast<std::vector<std::string> >();
    s.order = d["order"].cast<std::vector<int> >();
    for (const auto& r : d["ranges"].cast<std::vector<std::pair<uint64_t, uint64_t> > >())
        s.ranges.push_back({r.first, r.second});
    s.flags = d["flags"].cast<std::vector<uint32_t> >();
    return s;
}

py::dict prepare(const std::string& param, const std::string& bin, const py::dict& inputs, const std::vector<std::string>& outputs,
                 int threads, bool packing, bool winograd, bool sgemm, bool fp16, const std::string& transformed)
{
    const flexnn::NamedMats mats = named_mats(inputs);
    const flexnn::RuntimeOptions options = runtime_options(threads, packing, winograd, sgemm, fp16, "any", false);
    flexnn::PrepareResult result;
    {
        py::gil_scoped_release unlocked;
        check(flexnn::prepare(param, bin, transformed, mats, outputs, options, result));
    }
    py::dict d;
    d["schedule"] = schedule_dict(result.schedule);
    d["profile"] = flexnn::plan_dict::profile_to_columns(result.profile);
    d["outputs"] = arrays(result.outputs);
    d["outside_bytes"] = result.outside_bytes;
    return d;
}

// The executor as Python holds it: every call releases the GIL while native code runs.
class PyExecutor
{
public:
    PyExecutor(const std::string& param, const std::string& bin, const py::dict& schedule, const TensorRows& tensors,
               const LayerRows& layers, int threads, bool packing, bool winograd, bool sgemm, bool fp16,
               const std::string& loader, bool drop_page_cache, bool overlap_loading, bool direct_io, bool static_arena,
               const std::string& transformed, uint64_t outside_bytes, bool canaries, bool map_weights)
    {
        flexnn::RuntimeOptions options
            = runtime_options(threads, packing, winograd, sgemm, fp16, loader, drop_page_cache, overlap_loading, direct_io,
                              static_arena);
        options.outside_allowance = outside_bytes;
        options.canaries = canaries;
        options.map_weights = map_weights;
        flexnn::LayerSchedule s = schedule_from(schedule);
        flexnn::Profile p = flexnn::plan_dict::profile_from_columns(tensors, layers);
        py::gil_scoped_release unlocked;
        check(flexnn::Executor::create(param, bin, transformed, options, std::move(s), std::move(p), executor_));
    }
    void set_plan(const py::dict& columns)
    {
        const flexnn::Plan plan = flexnn::plan_dict::plan_from_dict(columns);
        py::gil_scoped_release unlocked;
        check(executor_->set_plan(plan));
    }
    void set_budget(uint64_t budget, const std::string& algorithm, uint64_t alignment, bool map_transformed)
    {
        const flexnn::PlannerOptions options{planner_algorithm_from(algorithm), alignment, map_transformed};
        py::gil_scoped_release unlocked;
        check(executor_->set_budget(budget, options));
    }
    py::tuple run(const py::dict& inputs)
    {
        // views of the arrays, not copies: the executor reads each in place or copies it once, into the arena
        std::vector<FloatArray> held;
        flexnn::NamedMats mats;
        for (const std::string& name : executor_->schedule().inputs)
        {
            if (!inputs.contains(name))
                throw std::invalid_argument("missing input '" + name + "'");
            held.push_back(inputs[py::str(name)].cast<FloatArray>());
            const FloatArray& array = held.back();
            ncnn::Mat view;
            check(flexnn::dense_view(std::vector<int>(array.shape(), array.shape() + array.ndim()), array.data(), view));
            mats.emplace_back(name, view);
        }
        if (inputs.size() != mats.size())
            throw std::invalid_argument("the model takes inputs " + py::str(py::cast(executor_->schedule().inputs)).cast<std::string>());
        // each output copied once, from the arena into the buffer its array then owns
        std::vector<DenseOutput> taken;
        flexnn::RunStats stats;
        {
            py::gil_scoped_release unlocked;
            const auto take = [&taken](const std::string& name, const ncnn::Mat& output) {
                return take_dense(name, output, taken);
            };
            check(executor_->run(mats, take, stats));
        }
        py::dict outputs;
        for (DenseOutput& t : taken)
            outputs[py::str(t.name)] = owning_array(t);
        py::dict s;
        s["latency_us"] = stats.latency_us;
        s["load_wait_us"] = stats.load_wait_us;
        s["loader_cpu_us"] = stats.loader_cpu_us;
        s["outside_peak_bytes"] = stats.outside_peak_bytes;
        s["outside_allocations"] = stats.outside_allocations;
        s["loaded_layers"] = stats.loaded_layers;
        s["built_layers"] = stats.built_layers;
        s["arena_weight_bytes"] = stats.arena_weight_bytes;
        s["mapped_weight_bytes"] = stats.mapped_weight_bytes;
        s["mapped_peak_bytes"] = stats.mapped_peak_bytes;
        return py::make_tuple(outputs, s);
    }
    py::dict plan() const
    {
        return flexnn::plan_dict::plan_to_dict(executor_->plan());
    }
    py::tuple profile() const
    {
        return flexnn::plan_dict::profile_to_columns(executor_->profile());
    }
    uint64_t arena_bytes() const
    {
        return executor_->arena_bytes();
    }
    uint64_t reserved_outside_bytes() const
    {
        return executor_->reserved_outside_bytes();
    }

private:
    std::unique_ptr<flexnn::Executor> executor_;
};

// NCNN's own Net on a memory-mapped .bin (runtime/mapped_net.h): the mmap baseline.
class PyMappedNet
{
public:
    PyMappedNet(const std::string& param, const std::string& bin, int threads, bool packing, bool winograd, bool sgemm, bool fp16)
    {
        const flexnn::RuntimeOptions options = runtime_options(threads, packing, winograd, sgemm, fp16, "any", false);
        py::gil_scoped_release unlocked;
        check(flexnn::MappedNet::open(param, bin, options, net_));
    }
    py::dict run(const py::dict& inputs, const std::vector<std::string>& outputs)
    {
        const flexnn::NamedMats mats = named_mats(inputs);
        flexnn::NamedMats out;
        {
            py::gil_scoped_release unlocked;
            check(net_->run(mats, outputs, out));
        }
        return arrays(out);
    }

private:
    std::unique_ptr<flexnn::MappedNet> net_;
};

} // namespace

PYBIND11_MODULE(_native, m)
{
    m.doc() = "flexnn_ncnn native runtime (patched NCNN inside)";
    flexnn::fix_malloc_thresholds(); // before the caller reads a sidecar: runtime/heap_policy.h

    m.def("build_info", [] {
        flexnn::BuildInfo info = flexnn::build_info();
        py::dict d;
        d["ncnn_version"] = info.ncnn_version;
        d["patch_series_id"] = info.patch_series_id;
        d["target"] = info.target;
        d["isa"] = info.isa;
        d["cpu_features"] = flexnn::cpu_features();       // NCNN's kernel and layout choices depend on them
        d["l2_bytes"] = ncnn::get_cpu_level2_cache_size(); // and its GEMM tiles on this
        return d;
    }, "What this module was built from: NCNN version, patch series id, target, ISA; and this CPU's features and L2 size.");

    m.def("run_stock", &run_stock, py::arg("param"), py::arg("bin"), py::arg("inputs"), py::arg("outputs"),
          py::arg("threads") = 1, py::arg("winograd") = true, py::arg("sgemm") = true, py::arg("packing") = true,
          py::arg("count_weights") = false, py::arg("count_workspace") = false,
          "One inference with the patched NCNN's own Net. Returns ({output: array}, stats); with "
          "count_weights, weights and their transformed copies are routed through a counting allocator; "
          "with count_workspace, the inference's workspace.");

    m.def("prepare", &prepare, py::arg("param"), py::arg("bin"), py::arg("inputs"), py::arg("outputs"), py::arg("threads") = 1,
          py::arg("packing") = true, py::arg("winograd") = true, py::arg("sgemm") = true, py::arg("fp16") = true,
          py::arg("transformed") = "",
          "Prepare a model on this machine: {schedule, profile: (tensors, layers), outputs, outside_bytes}; "
          "with transformed, the layers' pre-transformed weights are written to that path.");

    py::class_<PyMappedNet>(m, "MappedNet", "NCNN's own Net with its .bin memory-mapped (runtime/mapped_net.h).")
        .def(py::init<const std::string&, const std::string&, int, bool, bool, bool, bool>(), py::arg("param"), py::arg("bin"),
             py::arg("threads") = 1, py::arg("packing") = true, py::arg("winograd") = true, py::arg("sgemm") = true,
             py::arg("fp16") = true)
        .def("run", &PyMappedNet::run, py::arg("inputs"), py::arg("outputs"), "one inference: {output: array}");

    py::class_<PyExecutor>(m, "Executor", "A prepared model run under a plan (runtime/executor.h).")
        .def(py::init<const std::string&, const std::string&, const py::dict&, const TensorRows&,
                      const LayerRows&, int, bool, bool, bool, bool, const std::string&, bool, bool, bool, bool,
                      const std::string&, uint64_t, bool, bool>(),
             py::arg("param"), py::arg("bin"), py::arg("schedule"), py::arg("tensors"), py::arg("layers"), py::arg("threads") = 1,
             py::arg("packing") = true, py::arg("winograd") = true, py::arg("sgemm") = true, py::arg("fp16") = true,
             py::arg("loader") = "any", py::arg("drop_page_cache") = false, py::arg("overlap_loading") = true,
             py::arg("direct_io") = false, py::arg("static_arena") = true, py::arg("transformed") = "",
             py::arg("outside_bytes") = UINT64_MAX, py::arg("canaries") = false, py::arg("map_weights") = false)
        .def("set_plan", &PyExecutor::set_plan, py::arg("plan"), "check the plan (planner columns) and move to its arena")
        .def("set_budget", &PyExecutor::set_budget, py::arg("budget"), py::arg("algorithm") = "flexnn", py::arg("alignment") = 64,
             py::arg("map_transformed") = false,
             "re-plan the stored profile for this arena size and move to it")
        .def("run", &PyExecutor::run, py::arg("inputs"), "one inference: ({output: array}, stats)")
        .def("plan", &PyExecutor::plan)
        .def("profile", &PyExecutor::profile, "the profile the runtime holds, as (tensors, layers) columns: a copy")
        .def("arena_bytes", &PyExecutor::arena_bytes)
        .def("reserved_outside_bytes", &PyExecutor::reserved_outside_bytes,
             "bytes held outside the arena for the executor's life (the O_DIRECT window): a budget must leave room");

    m.def("cpu_clusters", [](const std::string& sysfs_cpu_root) {
        std::vector<std::vector<int> > clusters;
        check(flexnn::cpu_clusters(sysfs_cpu_root, clusters));
        return clusters;
    }, py::arg("sysfs_cpu_root") = flexnn::kSysfsCpuRoot, "cores grouped by maximum frequency, slowest first ([] when unreadable)");
    m.def("middle_cpus", [](const std::string& sysfs_cpu_root) {
        std::vector<int> cpus;
        check(flexnn::middle_cpus(sysfs_cpu_root, cpus));
        return cpus;
    }, py::arg("sysfs_cpu_root") = flexnn::kSysfsCpuRoot, "the cores loader='middle' pins the loading thread to ([]: any)");
}
