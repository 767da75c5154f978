// flexnn_ncnn._planner: the planner and its checker, as Python sees them. A profile travels as
// (tensors, layers): tensors are (layer, role, ordinal, size, first_use, last_use) tuples with role
// 0 weight, 1 activation, 2 intermediate; layers are (load_us, compute_us) tuples. A plan travels as
// a dict of columns parallel to the tensors. flexnn_ncnn/planning.py wraps this in dataclasses.
#include "planner/check_plan.h"
#include "planner/planner.h"
#include "planner/stall.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <tuple>

namespace py = pybind11;

namespace {

using TensorTuple = std::tuple<int, int, int, uint64_t, int, int>;
using LayerTuple = std::tuple<double, double>;

flexnn::Profile to_profile(const std::vector<TensorTuple>& tensors, const std::vector<LayerTuple>& layers)
{
    flexnn::Profile profile;
    profile.tensors.reserve(tensors.size());
    for (const auto& t : tensors)
    {
        profile.tensors.push_back({std::get<0>(t), static_cast<flexnn::Role>(std::get<1>(t)), std::get<2>(t), std::get<3>(t),
                                   std::get<4>(t), std::get<5>(t)});
    }
    for (const auto& l : layers)
        profile.layers.push_back({std::get<0>(l), std::get<1>(l)});
    return profile;
}

flexnn::Algorithm to_algorithm(const std::string& name)
{
    if (name == "flexnn")
        return flexnn::Algorithm::FlexNN;
    if (name == "algorithm1")
        return flexnn::Algorithm::Algorithm1;
    throw std::invalid_argument("unknown planning algorithm '" + name + "': use flexnn or algorithm1");
}

py::dict to_dict(const flexnn::Plan& plan)
{
    std::vector<uint64_t> offsets;
    std::vector<int> load_after;
    std::vector<bool> pinned;
    for (const auto& p : plan.tensors)
    {
        offsets.push_back(p.offset);
        load_after.push_back(p.load_after);
        pinned.push_back(p.pinned);
    }
    std::vector<std::pair<int, int> > dependencies;
    for (const auto& d : plan.dependencies)
        dependencies.emplace_back(d.comp, d.load);
    py::dict d;
    d["algorithm"] = flexnn::algorithm_name(plan.algorithm);
    d["budget"] = plan.budget;
    d["alignment"] = plan.alignment;
    d["arena_bytes"] = plan.arena_bytes;
    d["lower_bound"] = plan.lower_bound;
    d["offsets"] = offsets;
    d["load_after"] = load_after;
    d["pinned"] = pinned;
    d["dependencies"] = dependencies;
    return d;
}

flexnn::Plan from_dict(const py::dict& d)
{
    flexnn::Plan plan;
    plan.algorithm = to_algorithm(d["algorithm"].cast<std::string>());
    plan.budget = d["budget"].cast<uint64_t>();
    plan.alignment = d["alignment"].cast<uint64_t>();
    plan.arena_bytes = d["arena_bytes"].cast<uint64_t>();
    plan.lower_bound = d["lower_bound"].cast<uint64_t>();
    const auto offsets = d["offsets"].cast<std::vector<uint64_t> >();
    const auto load_after = d["load_after"].cast<std::vector<int> >();
    const auto pinned = d["pinned"].cast<std::vector<bool> >();
    if (load_after.size() != offsets.size() || pinned.size() != offsets.size())
        throw std::invalid_argument("plan columns offsets, load_after and pinned differ in length");
    for (size_t i = 0; i < offsets.size(); i++)
        plan.tensors.push_back({offsets[i], load_after[i], static_cast<bool>(pinned[i])});
    for (const auto& dep : d["dependencies"].cast<std::vector<std::pair<int, int> > >())
        plan.dependencies.push_back({dep.first, dep.second});
    return plan;
}

// {"plan": dict} on success; {"error": str, "infeasible": bool, "min_feasible_budget": int} otherwise.
py::dict make_plan(const std::vector<TensorTuple>& tensors, const std::vector<LayerTuple>& layers, uint64_t budget,
                   const std::string& algorithm, uint64_t alignment)
{
    const flexnn::Profile profile = to_profile(tensors, layers);
    const flexnn::PlannerOptions options{to_algorithm(algorithm), alignment};
    flexnn::PlanResult result;
    {
        py::gil_scoped_release unlocked;
        result = flexnn::make_plan(profile, budget, options);
    }
    py::dict out;
    if (result.status.ok())
    {
        out["plan"] = to_dict(result.plan);
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
    m.def("make_plan", &make_plan, py::arg("tensors"), py::arg("layers"), py::arg("budget"), py::arg("algorithm"), py::arg("alignment"));
    m.def(
        "check_plan",
        [](const std::vector<TensorTuple>& tensors, const std::vector<LayerTuple>& layers, const py::dict& plan) {
            return flexnn::check_plan(to_profile(tensors, layers), from_dict(plan)).message();
        },
        py::arg("tensors"), py::arg("layers"), py::arg("plan"), "the first violation as one line; empty when the plan is sound");
    m.def(
        "validate_profile",
        [](const std::vector<TensorTuple>& tensors, const std::vector<LayerTuple>& layers) {
            return flexnn::validate_profile(to_profile(tensors, layers)).message();
        },
        py::arg("tensors"), py::arg("layers"));
    m.def(
        "min_feasible_budget",
        [](const std::vector<TensorTuple>& tensors, const std::vector<LayerTuple>& layers, const std::string& algorithm, uint64_t alignment) {
            const flexnn::Profile profile = to_profile(tensors, layers);
            const flexnn::PlannerOptions options{to_algorithm(algorithm), alignment};
            py::gil_scoped_release unlocked;
            return flexnn::min_feasible_budget(profile, options);
        },
        py::arg("tensors"), py::arg("layers"), py::arg("algorithm"), py::arg("alignment"));
    m.def(
        "lower_bound",
        [](const std::vector<TensorTuple>& tensors, const std::vector<LayerTuple>& layers, uint64_t alignment) {
            return flexnn::live_bytes_lower_bound(to_profile(tensors, layers), alignment);
        },
        py::arg("tensors"), py::arg("layers"), py::arg("alignment"));
    m.def(
        "expected_stall_us",
        [](const std::vector<TensorTuple>& tensors, const std::vector<LayerTuple>& layers, const py::dict& plan) {
            return flexnn::expected_stall_us(to_profile(tensors, layers), from_dict(plan));
        },
        py::arg("tensors"), py::arg("layers"), py::arg("plan"));
}
