#ifndef FLEXNN_ARENA_ALLOCATOR_H
#define FLEXNN_ARENA_ALLOCATOR_H

#include "planner/profile.h"
#include "runtime/arena_canary.h"
#include "runtime/by_step.h"
#include "runtime/counting_allocator.h"
#include "runtime/failure.h"
#include "runtime/fault_injector.h"
#include "runtime/step_clock.h"

#include <allocator.h>
#include <functional>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace flexnn {

// Where the plan puts one buffer, and how many bytes prepare saw requested for it.
struct PlannedBuffer
{
    uint64_t offset;
    uint64_t size;
};

// The buffers of one role, by step then by ordinal within (step, role).
using PlannedBuffers = ByStep<PlannedBuffer>;

// names a step in messages ("step 3 (layer conv1)")
using StepNamer = std::function<std::string(int)>;

// One role's view of the arena: serves each request at its planned offset. A request is identified
// structurally: the clock's step, this role, and its ordinal among this role's requests of that
// step (counted per step, never across threads). A request the plan does not have, or larger than
// planned, fails the inference (recorded in `failure`) and is served from `outside` so nothing is
// written over another buffer. Requests from any thread but the owner (an OpenMP worker inside a
// layer) cannot be ordered: they are served and counted by `outside`.
// Releasing an arena buffer does nothing: its bytes belong to the plan. Bound to no arena (static
// arena off), it checks each request against the plan the same way and serves it from `outside`.
// What `outside` holds is bounded by the plan too (bind's outside_limit): a request that takes it
// beyond fails the inference, naming the step, and is still served (NCNN's kernels do not all check
// an allocation), so the error is never a silent overrun nor a crash. With a canary, a request served
// in the arena fails the inference when its bytes were written since they were poisoned, and an
// activation or intermediate poisons its bytes when released (a weight dies by the plan, not by
// its release: the executor poisons it). Intermediates of one step may be planned over each other's
// bytes (profile.h: request intervals): one whose bytes overlap an intermediate NCNN still holds
// fails the inference and is served from `outside`.
class ArenaAllocator : public ncnn::Allocator
{
public:
    ArenaAllocator(Role role, const StepClock& clock, Failure& failure, CountingAllocator& outside, FaultInjector& faults);
    void* fastMalloc(size_t size) override;
    void fastFree(void* ptr) override;
    // A request the plan has, served by the caller at its planned bytes (a weight mapped there from
    // its file): counted and checked like one, so the ordinals after it stay the plan's. The planned
    // address; null when the plan does not have it (the inference has failed, naming it) or no arena
    // is bound.
    unsigned char* pass(size_t size);

    // serve `buffers` out of `base` (nullptr: from `outside`) from now on, `outside` holding at most
    // `outside_limit` bytes (SIZE_MAX: unbounded), checked by `canary` (nullptr: none) in the arena;
    // step_name(step) names the step in messages (null: its number)
    void bind(unsigned char* base, PlannedBuffers buffers, const StepNamer* step_name, size_t outside_limit,
              ArenaCanary* canary);
    // ordinals start again from 0 at every step; requests are served to `owner` only
    void begin_inference(std::thread::id owner);
    // bytes served in the arena on the owner thread since begin_inference
    uint64_t served_bytes() const
    {
        return served_bytes_;
    }

private:
    struct Held
    {
        uint64_t lo, hi; // arena bytes [lo, hi)
        int ordinal;
    };

    void* serve_outside(size_t size, int step);
    // the owner's next ordinal at `step` (0 for a step the plan does not have)
    int take_ordinal(int step);
    // the next request's planned buffer, or null when the plan does not have it (the failure is set)
    const PlannedBuffer* planned_for(size_t size, int step, int ordinal);
    std::string describe(size_t size, int step, int ordinal) const;
    std::string step_name(int step) const;
    // an intermediate served in the arena at `step` and still held whose bytes overlap [lo, hi),
    // or null; forgets those of earlier steps
    const Held* held_over(int step, uint64_t lo, uint64_t hi);

    const Role role_;
    const StepClock& clock_;
    Failure& failure_;
    CountingAllocator& outside_;
    FaultInjector& faults_; // consulted for every request on the owner thread
    std::atomic<std::thread::id> owner_;

    unsigned char* base_ = nullptr;
    PlannedBuffers buffers_;
    const StepNamer* step_namer_ = nullptr;
    size_t outside_limit_ = SIZE_MAX;
    ArenaCanary* canary_ = nullptr;
    std::vector<int> next_ordinal_; // per step, touched by the owner only
    uint64_t served_bytes_ = 0;     // owner only
    std::vector<Held> held_; // intermediates served in the arena at held_step_, not released yet; owner only
    int held_step_ = -1;
};

} // namespace flexnn

#endif // FLEXNN_ARENA_ALLOCATOR_H
