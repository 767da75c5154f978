#ifndef FLEXNN_PLANNER_PLANNER_H
#define FLEXNN_PLANNER_PLANNER_H

// Preload-aware memory planning (paper section 3.3): one arena of the budget's size holds every
// weight, activation and intermediate of a profile; weights are preloaded as early as space allows,
// or pinned when the budget has room for them.
//
// Feasibility granularity: the usable arena is the budget rounded down to the alignment, and every
// size is rounded up to it, so budgets between two multiples of the alignment behave alike; the
// smallest feasible budget reported is a multiple of the alignment, and one byte less is infeasible.

#include "planner/plan.h"
#include "planner/profile.h"

namespace flexnn {

struct PlannerOptions
{
    Algorithm algorithm = Algorithm::FlexNN;
    uint64_t alignment = 64; // NCNN_MALLOC_ALIGN on every target
    // the runtime maps transformed weights from their file over their arena bytes: each is planned
    // at a page, with whole pages (planned_bytes)
    bool map_transformed = false;
};

struct PlanResult
{
    Status status;                    // ok, or why no plan was made (one line)
    Plan plan;                        // complete when status is ok, empty otherwise
    bool infeasible = false;          // the profile is valid but does not fit in the budget
    uint64_t min_feasible_budget = 0; // when the budget is infeasible: the smallest feasible budget above it, 0 if none was found
};

// Same profile, budget and options -> the same plan, byte for byte.
PlanResult make_plan(const Profile& profile, uint64_t budget, const PlannerOptions& options);

// The smallest budget in [live_bytes_lower_bound, ...) at which make_plan succeeds, found by
// bisection (feasible at the result, infeasible one byte below); 0 if none was found. The planner's
// feasibility is not proven monotone in the budget: a smaller isolated feasible budget may exist.
uint64_t min_feasible_budget(const Profile& profile, const PlannerOptions& options);

} // namespace flexnn

#endif // FLEXNN_PLANNER_PLANNER_H
