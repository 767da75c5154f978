// flexnn_ncnn._native: the runtime library, as Python sees it. Inputs and outputs are float32
// numpy arrays in NCNN's shape convention (see runtime/tensor.h); errors raise RuntimeError.
#include "runtime/build_info.h"
#include "runtime/stock_run.h"
#include "runtime/tensor.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>

namespace py = pybind11;

namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

void check(const flexnn::Status& s)
{
    if (!s.ok())
        throw std::runtime_error(s.message());
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
    return d;
}

py::tuple run_stock(const std::string& param, const std::string& bin, const std::map<std::string, FloatArray>& inputs,
                    const std::vector<std::string>& outputs, int threads, bool winograd, bool sgemm, bool packing,
                    bool count_weights)
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
    return py::make_tuple(out, stats);
}

} // namespace

PYBIND11_MODULE(_native, m)
{
    m.doc() = "flexnn_ncnn native runtime (patched NCNN inside)";

    m.def("build_info", [] {
        flexnn::BuildInfo info = flexnn::build_info();
        py::dict d;
        d["ncnn_version"] = info.ncnn_version;
        d["patch_series_id"] = info.patch_series_id;
        d["target"] = info.target;
        d["isa"] = info.isa;
        return d;
    }, "What this module was built from: NCNN version, patch series id, target, ISA.");

    m.def("run_stock", &run_stock, py::arg("param"), py::arg("bin"), py::arg("inputs"), py::arg("outputs"),
          py::arg("threads") = 1, py::arg("winograd") = true, py::arg("sgemm") = true, py::arg("packing") = true,
          py::arg("count_weights") = false,
          "One inference with the patched NCNN's own Net. Returns ({output: array}, stats); with "
          "count_weights, weights and their transformed copies are routed through a counting allocator.");
}
