// How a profile and a plan travel between Python and C++ (pybind11 only; included by the two binding
// files, planner/bind_planner.cpp and python/module.cpp, and nowhere else).
//
// A profile is (tensors, layers): tensors are (layer, role, ordinal, size, first_use, last_use,
// transformed) tuples with role 0 weight, 1 activation, 2 intermediate; layers are (load_us, compute_us) tuples.
// A plan is a dict of columns parallel to the profile's tensors (offsets, load_after, pinned) plus
// its scalars and (comp, load) dependencies. flexnn_ncnn/planning.py wraps both in dataclasses.
#ifndef FLEXNN_PLANNER_PLAN_DICT_H
#define FLEXNN_PLANNER_PLAN_DICT_H

#include "planner/plan.h"
#include "planner/planner.h"
#include "planner/profile.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace flexnn {
namespace plan_dict {

using TensorTuple = std::tuple<int, int, int, uint64_t, int, int, bool>;
using LayerTuple = std::tuple<double, double>;

inline Profile profile_from_columns(const std::vector<TensorTuple>& tensors, const std::vector<LayerTuple>& layers)
{
    Profile profile;
    profile.tensors.reserve(tensors.size());
    for (const auto& t : tensors)
    {
        const int role = std::get<1>(t);
        if (role < 0 || role > 2)
            throw std::invalid_argument("profile: unknown role " + std::to_string(role));
        profile.tensors.push_back({std::get<0>(t), static_cast<Role>(role), std::get<2>(t), std::get<3>(t), std::get<4>(t), std::get<5>(t),
                                  std::get<6>(t)});
    }
    profile.layers.reserve(layers.size());
    for (const auto& l : layers)
        profile.layers.push_back({std::get<0>(l), std::get<1>(l)});
    return profile;
}

inline pybind11::tuple profile_to_columns(const Profile& profile)
{
    std::vector<TensorTuple> tensors;
    tensors.reserve(profile.tensors.size());
    for (const auto& t : profile.tensors)
        tensors.emplace_back(t.layer, static_cast<int>(t.role), t.ordinal, t.size, t.first_use, t.last_use, t.transformed);
    std::vector<LayerTuple> layers;
    layers.reserve(profile.layers.size());
    for (const auto& l : profile.layers)
        layers.emplace_back(l.load_us, l.compute_us);
    return pybind11::make_tuple(tensors, layers);
}

// what the planner is asked to plan with
inline Algorithm planner_algorithm_from(const std::string& name)
{
    if (name == "flexnn")
        return Algorithm::FlexNN;
    if (name == "algorithm1")
        return Algorithm::Algorithm1;
    throw std::invalid_argument("unknown planning algorithm '" + name + "': use flexnn or algorithm1");
}

// what a plan may name: every plan is checked and run, swapnet plans are made in Python (bench/swapnet.py)
inline Algorithm algorithm_from(const std::string& name)
{
    if (name == "swapnet")
        return Algorithm::SwapNet;
    if (name == "flexnn" || name == "algorithm1")
        return planner_algorithm_from(name);
    throw std::invalid_argument("unknown plan algorithm '" + name + "': flexnn, algorithm1 or swapnet");
}

inline pybind11::dict plan_to_dict(const Plan& plan)
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
    pybind11::dict d;
    d["algorithm"] = algorithm_name(plan.algorithm);
    d["budget"] = plan.budget;
    d["alignment"] = plan.alignment;
    d["arena_bytes"] = plan.arena_bytes;
    d["mapped"] = plan.mapped;
    d["lower_bound"] = plan.lower_bound;
    d["offsets"] = offsets;
    d["load_after"] = load_after;
    d["pinned"] = pinned;
    d["dependencies"] = dependencies;
    return d;
}

inline Plan plan_from_dict(const pybind11::dict& d)
{
    Plan plan;
    plan.algorithm = algorithm_from(d["algorithm"].cast<std::string>());
    plan.budget = d["budget"].cast<uint64_t>();
    plan.alignment = d["alignment"].cast<uint64_t>();
    plan.arena_bytes = d["arena_bytes"].cast<uint64_t>();
    plan.mapped = d.contains("mapped") && d["mapped"].cast<bool>();
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

} // namespace plan_dict
} // namespace flexnn

#endif // FLEXNN_PLANNER_PLAN_DICT_H
