#ifndef FLEXNN_PLANNER_RECORD_PAGES_H
#define FLEXNN_PLANNER_RECORD_PAGES_H

// Mapped plans (Plan::mapped): which pages of each streamed record must be the arena's own again once
// its layer has computed. Until then they are the file's, read-only. A page's next tenant is the first
// tensor over it after the record (wrapping into the next inference). A page whose next tenant is
// written (an activation, an intermediate, a weight read into the arena) must be given back before
// that tenant is claimed; a page whose next tenant is another record needs nothing (that record is
// mapped over it), nor does a page no tensor takes again (it stays resident inside the arena's
// bytes, as an anonymous page would).

#include "planner/plan.h"
#include "planner/profile.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace flexnn {

using ByteRanges = std::vector<std::pair<uint64_t, uint64_t> >; // [offset, offset + bytes) as (offset, bytes)

// Per profile tensor: the page ranges of a streamed record to give back after its last use, ascending
// and disjoint; empty for every other tensor and for every tensor of a plan that maps nothing.
std::vector<ByteRanges> pages_to_give_back(const Profile& profile, const Plan& plan);

} // namespace flexnn

#endif // FLEXNN_PLANNER_RECORD_PAGES_H
