#ifndef FLEXNN_PLANNER_STALL_H
#define FLEXNN_PLANNER_STALL_H

#include "planner/plan.h"
#include "planner/profile.h"

namespace flexnn {

// The time computation is expected to wait for loading in one inference, from the profile's costs
// and the plan's dependencies: the loading thread runs load(j) in layer order, each once its
// dependency's computation has finished, reading the layer's non-pinned share of its load time;
// comp(j) starts once comp(j - 1) and load(j) have finished. A proxy for ranking plans, not a
// measurement.
double expected_stall_us(const Profile& profile, const Plan& plan);

} // namespace flexnn

#endif // FLEXNN_PLANNER_STALL_H
