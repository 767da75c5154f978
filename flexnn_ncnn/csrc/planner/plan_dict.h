// How a profile and a plan travel between Python and C++ (pybind11 only; included by the two binding
// files, planner/bind_planner.cpp and python/module.cpp, and nowhere else).
//
// A profile is (tensors, layers): tensors are (layer, role, ordinal, size, first_use, last_use,
// transformed, released_before) rows with role 0 weight, 1 activation, 2 intermediate; layers are (load_us, compute_us) rows.
// A plan is a dict of columns parallel to the profile's tensors (offsets, load_after, pinned) plus
// its scalars and (comp, load) dependencies. flexnn_ncnn/planning.py wraps both in dataclasses.
#ifndef FLEXNN_PLANNER_PLAN_DICT_H
#define FLEXNN_PLANNER_PLAN_DICT_H

#include "planner/plan.h"
#include "planner/planner.h"
#include "planner/profile.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace flexnn {
namespace plan_dict {

// both ways: an (n, 8) int64 row per tensor, an (m, 2) float64 row per layer (numpy arrays; sequences
// of tuples Python passes are converted)
using TensorRows = pybind11::array_t<int64_t, pybind11::array::c_style | pybind11::array::forcecast>;
using LayerRows = pybind11::array_t<double, pybind11::array::c_style | pybind11::array::forcecast>;

// rows x width of a 2-d array (an empty sequence is zero rows), else invalid_argument
inline pybind11::ssize_t rows_of(const pybind11::array& a, pybind11::ssize_t width, const char* what)
{
    if (a.size() == 0)
        return 0;
    if (a.ndim() != 2 || a.shape(1) != width)
        throw std::invalid_argument(std::string("profile: ") + what + " must have " + std::to_string(width) + " columns");
    return a.shape(0);
}

// a profile number into an int field, else overflow_error (Python's OverflowError)
inline int int_field(int64_t value, pybind11::ssize_t row, const char* name)
{
    if (value < INT32_MIN || value > INT32_MAX)
        throw std::overflow_error("profile: tensor " + std::to_string(row) + "'s " + name + " " + std::to_string(value) + " is out of range");
    return static_cast<int>(value);
}

inline Profile profile_from_columns(const TensorRows& tensors, const LayerRows& layers)
{
    Profile profile;
    const pybind11::ssize_t n = rows_of(tensors, 8, "tensors");
    profile.tensors.reserve(n);
    for (pybind11::ssize_t i = 0; i < n; i++)
    {
        const int64_t* t = tensors.data(i, 0);
        const int role = int_field(t[1], i, "role");
        if (role < 0 || role > 2)
            throw std::invalid_argument("profile: unknown role " + std::to_string(role));
        if (t[3] < 0 || t[6] < 0 || t[6] > 1)
            throw std::overflow_error("profile: tensor " + std::to_string(i) + "'s size or transformed flag is out of range");
        profile.tensors.push_back({int_field(t[0], i, "layer"), int_field(t[2], i, "ordinal"), static_cast<uint64_t>(t[3]),
                                   int_field(t[4], i, "first_use"), int_field(t[5], i, "last_use"),
                                   int_field(t[7], i, "released_before"), static_cast<Role>(role), t[6] != 0});
    }
    const pybind11::ssize_t m = rows_of(layers, 2, "layers");
    profile.layers.reserve(m);
    for (pybind11::ssize_t s = 0; s < m; s++)
        profile.layers.push_back({*layers.data(s, 0), *layers.data(s, 1)});
    return profile;
}

inline pybind11::tuple profile_to_columns(const Profile& profile)
{
    const pybind11::ssize_t n = static_cast<pybind11::ssize_t>(profile.tensors.size());
    TensorRows tensors({n, static_cast<pybind11::ssize_t>(8)});
    auto t = tensors.mutable_unchecked<2>();
    for (pybind11::ssize_t i = 0; i < n; i++)
    {
        const TensorUse& u = profile.tensors[i];
        const int64_t row[8] = {u.layer, static_cast<int64_t>(u.role), u.ordinal, static_cast<int64_t>(u.size), u.first_use,
                                u.last_use, u.transformed ? 1 : 0, u.released_before};
        for (int k = 0; k < 8; k++)
            t(i, k) = row[k];
    }
    const pybind11::ssize_t m = static_cast<pybind11::ssize_t>(profile.layers.size());
    LayerRows layers({m, static_cast<pybind11::ssize_t>(2)});
    auto l = layers.mutable_unchecked<2>();
    for (pybind11::ssize_t s = 0; s < m; s++)
    {
        l(s, 0) = profile.layers[s].load_us;
        l(s, 1) = profile.layers[s].compute_us;
    }
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
