#ifndef FLEXNN_PLANNER_PROFILE_H
#define FLEXNN_PLANNER_PROFILE_H

// The planner's input: what one sequential inference of the (sliced) model allocates, and when.
//
// Time is counted in steps: step t is the computation of layer t, comp(t); layers compute one at a
// time, in index order. A tensor holds its bytes over a HALF-OPEN step interval [begin, end): it is
// claimed once comp(begin - 1) has finished and released once comp(end - 1) has finished. Two
// tensors whose intervals only touch (one ends at t, the other begins at t) MAY share bytes.
// Without preloading, a tensor used by layers first_use..last_use occupies [first_use, last_use + 1).
//
// Within its step, an intermediate is live over the requests of its layer's intermediates
// [ordinal, released_before): two intermediates of one layer whose request intervals do not
// overlap MAY share bytes (NCNN released the first before it asked for the second).

#include "runtime/status.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace flexnn {

enum class Role : uint8_t
{
    Weight = 0,       // read from storage by the loading thread (possibly ahead of its layer)
    Activation = 1,   // a layer's output blob, live until its last consumer
    Intermediate = 2, // scratch of one layer's computation (im2col, workspace)
};

const char* role_name(Role role);

// A runtime holds one per tensor of its profile (thousands in a finely sliced model): its fields are
// ordered so that it packs into 32 bytes.
struct TensorUse
{
    int layer;     // owning layer: loads (weight) or computes (activation, intermediate) it
    int ordinal;   // position among the owning layer's tensors of this role, in allocation order
    uint64_t size; // bytes requested, > 0
    int first_use; // == layer
    int last_use;  // >= first_use; == layer for intermediates
    // intermediates only: released before its layer's intermediate of this ordinal was requested
    // (> ordinal); -1: held to its layer's end (every other tensor: -1)
    int released_before = -1;
    Role role;
    // weights only: a pre-transformed record of the layer's transformed-weights file, which the
    // runtime may map over its arena bytes instead of reading it there (PlannerOptions::map_transformed)
    bool transformed = false;
};
static_assert(sizeof(TensorUse) == 32, "TensorUse packs into 32 bytes");

// the requests of its layer's intermediates over which `t` is live, [first, second); every other
// tensor: all of them
std::pair<int, int> request_interval(const TensorUse& t);

struct LayerCost
{
    double load_us;    // reading the layer's weights from storage into the arena
    double compute_us; // the layer's computation
};

struct Profile
{
    std::vector<TensorUse> tensors; // (layer, role, ordinal) unique
    std::vector<LayerCost> layers;  // index = layer index = execution order
};

// At least one tensor, every size > 0, every index in range, first_use == layer <= last_use, intermediates single-step, identities unique,
// only weights transformed, only intermediates released within their step (after their request).
Status validate_profile(const Profile& profile);

// "layer 17 weight 2": how messages name a tensor.
std::string tensor_name(const TensorUse& tensor);

uint64_t align_up(uint64_t size, uint64_t alignment);

// whether some weight is a pre-transformed record (a mapped plan maps it in place)
bool has_transformed(const Profile& profile);

// Max over steps of the bytes live without preloading or pinning, each size aligned up, a step's
// intermediates counted at the most of them live at one of their requests: no layout of this
// profile fits in fewer bytes.
uint64_t live_bytes_lower_bound(const Profile& profile, uint64_t alignment);

} // namespace flexnn

#endif // FLEXNN_PLANNER_PROFILE_H
