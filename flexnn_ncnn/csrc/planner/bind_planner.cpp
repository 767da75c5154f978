// flexnn_ncnn._planner: the planner and its checker, as Python sees them. Profiles and plans travel
// as columns (planner/plan_dict.h); flexnn_ncnn/planning.py wraps them in dataclasses.
#include "planner/check_plan.h"
#include "planner/plan_dict.h"
#include "planner/planner.h"
#include "planner/stall.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;

namespace {

using flexnn::plan_dict::LayerRows;
using flexnn::plan_dict::plan_from_dict;
using flexnn::plan_dict::plan_to_dict;
using flexnn::plan_dict::planner_algorithm_from;
using flexnn::plan_dict::profile_from_columns;
using flexnn::plan_dict::TensorRows;

// {"plan": dict} on success; {"error": str, "infeasible": bool, "min_feasible_budget": int} otherwise.
py::dict make_plan(const TensorRows& tensors, const LayerRows& layers, uint64_t budget,
                   const std::string& algorithm, uint64_t alignment, bool map_transformed)
{
    const flexnn::Profile profile = profile_from_columns(tensors, layers);
    const flexnn::PlannerOptions options{planner_algorithm_from(algorithm), alignment, map_transformed};
    flexnn::PlanResult result;
    {
        py::gil_scoped_release unlocked;
        result = flexnn::make_plan(profile, budget, options);
    }
    py::dict out;
    if (result.status.ok())
    {
        out["plan"] = plan_to_dict(result.plan);
        return out;
    }
    out["error"] = result.status.message();
    out["infeasible"] = result.infeasible;
    out["min_feasible_budget"] = result.min_feasible_budget;
    return out;
}

} // namespace

PYBIND11_MODULE(_planner, m)
{
    m.doc() = "FlexNN preload-aware memory planner and plan checker";
    m.def("make_plan", &make_plan, py::arg("tensors"), py::arg("layers"), py::arg("budget"), py::arg("algorithm"), py::arg("alignment"),
          py::arg("map_transformed"));
    m.def(
        "check_plan",
        [](const TensorRows& tensors, const LayerRows& layers, const py::dict& plan) {
            return flexnn::check_plan(profile_from_columns(tensors, layers), plan_from_dict(plan)).message();
        },
        py::arg("tensors"), py::arg("layers"), py::arg("plan"), "the first violation as one line; empty when the plan is sound");
    m.def(
        "validate_profile",
        [](const TensorRows& tensors, const LayerRows& layers) {
            return flexnn::validate_profile(profile_from_columns(tensors, layers)).message();
        },
        py::arg("tensors"), py::arg("layers"));
    m.def(
        "min_feasible_budget",
        [](const TensorRows& tensors, const LayerRows& layers, const std::string& algorithm, uint64_t alignment,
           bool map_transformed) {
            const flexnn::Profile profile = profile_from_columns(tensors, layers);
            const flexnn::PlannerOptions options{planner_algorithm_from(algorithm), alignment, map_transformed};
            py::gil_scoped_release unlocked;
            return flexnn::min_feasible_budget(profile, options);
        },
        py::arg("tensors"), py::arg("layers"), py::arg("algorithm"), py::arg("alignment"), py::arg("map_transformed"));
    m.def(
        "lower_bound",
        [](const TensorRows& tensors, const LayerRows& layers, uint64_t alignment) {
            return flexnn::live_bytes_lower_bound(profile_from_columns(tensors, layers), alignment);
        },
        py::arg("tensors"), py::arg("layers"), py::arg("alignment"));
    m.def(
        "expected_stall_us",
        [](const TensorRows& tensors, const LayerRows& layers, const py::dict& plan) {
            return flexnn::expected_stall_us(profile_from_columns(tensors, layers), plan_from_dict(plan));
        },
        py::arg("tensors"), py::arg("layers"), py::arg("plan"));
}
