#ifndef FLEXNN_PLANNER_MAPPED_WINDOW_H
#define FLEXNN_PLANNER_MAPPED_WINDOW_H

// Planning for mapped weights (PlannerOptions::map_transformed): the layers that have transformed
// weights keep all their weights in a window above the arena proper. The runtime maps their
// transformed records from the file (zero copy) and reads the rest (raw biases) into the window's
// pages; a streamed layer's pages are dropped once it has computed, so what the window holds at a
// step is what the plan has live there, each tensor rounded up to whole pages (a mapped record with
// the page NCNN may over-read past it: window_bytes).
//
// The arena proper (activations, intermediates, the other layers' weights) is planned alone at its
// smallest feasible size; the window gets the rest of the budget, planned alone with page-sized
// alignment. A layer's weights all lie in one of the two, so each load has one load time and its
// dependencies come from one of the two plans.

#include "planner/planner.h"

namespace flexnn {

// the bytes a weight takes in the window before its rounding to pages: a transformed record is
// mapped with its pages and the page NCNN may over-read past its end
uint64_t window_bytes(const TensorUse& t);

// true for the layers whose weights go to the window: those with a transformed weight
std::vector<bool> window_layers(const Profile& profile);

// whether some layer has a transformed weight (a mapped plan of the profile has a window)
bool has_window(const Profile& profile);

// make_plan for a profile with window layers (options.map_transformed)
PlanResult make_mapped_plan(const Profile& profile, uint64_t budget, const PlannerOptions& options);

// min_feasible_budget for a profile with window layers
uint64_t mapped_min_feasible_budget(const Profile& profile, const PlannerOptions& options);

} // namespace flexnn

#endif // FLEXNN_PLANNER_MAPPED_WINDOW_H
