#ifndef FLEXNN_PLANNER_CHECK_PLAN_H
#define FLEXNN_PLANNER_CHECK_PLAN_H

// An independent check of a plan against its profile, sharing no code with the planner beyond the
// profile's definitions: run by the tests on every plan and by the runtime on every plan it loads.

#include "planner/plan.h"
#include "planner/profile.h"

namespace flexnn {

// The first violation found, as one line naming the tensor(s):
//  - shape: one placement per tensor, offsets aligned, every tensor inside arena_bytes <= budget;
//  - lifecycle: activations and intermediates claimed at their first use; a weight claimed at or
//    after the inference start and before its first use, or pinned (resident over every step);
//    the non-pinned weights of a layer share one load time;
//  - no two tensors share a byte during a step (half-open intervals, see profile.h);
//  - dependencies: each comp(i) -> load(j) has 0 <= i < j; and a load never writes bytes that a
//    computation still to finish uses: for every non-pinned weight W of layer j and every tensor X
//    over any of W's bytes and released before W is claimed, load(j) waits for comp(X's last use).
Status check_plan(const Profile& profile, const Plan& plan);

} // namespace flexnn

#endif // FLEXNN_PLANNER_CHECK_PLAN_H
