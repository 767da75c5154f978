#ifndef FLEXNN_RECORDING_ALLOCATOR_H
#define FLEXNN_RECORDING_ALLOCATOR_H

#include "planner/profile.h"
#include "runtime/counting_allocator.h"
#include "runtime/fault_injector.h"
#include "runtime/step_clock.h"

#include <allocator.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace flexnn {

// One buffer as prepare saw it: its identity (step, role, ordinal) and its lifetime in steps.
struct AllocationRecord
{
    int step;
    Role role;
    int ordinal;      // among this role's buffers of this step, in request order
    uint64_t size;    // bytes requested
    int last_use = -1; // the last step that may have read it; -1 while it is live
    bool transformed = false; // a pre-transformed weight (RecordingAllocator::mark_transformed)
    // intermediates: the ordinal its step's next request would have had when it was released
    // (TensorUse::released_before); -1 while live
    int released_before = -1;
};

// Prepare's allocator for one role: a heap allocation per request, each one recorded with the
// clock's step and its ordinal within (step, role). Requests from any thread other than the owner
// (the thread that built it; e.g. an OpenMP worker inside a layer) cannot be ordered, so they are
// served by `outside` and not recorded. With `faults` (tests), a request the injector fails is
// served but marks the allocator failed, and one it throws for throws std::bad_alloc.
class RecordingAllocator : public ncnn::Allocator
{
public:
    RecordingAllocator(Role role, const StepClock& clock, CountingAllocator& outside, FaultInjector* faults = nullptr);
    ~RecordingAllocator() override;
    void* fastMalloc(size_t size) override;
    void fastFree(void* ptr) override;

    // the owner's next request is a pre-transformed weight's (a record of the transformed file)
    void mark_transformed()
    {
        next_transformed_ = true;
    }
    // every buffer so far; those still live have last_use -1
    std::vector<AllocationRecord> records() const;
    Role role() const
    {
        return role_;
    }
    // whether the fault injector failed one of its requests
    bool failed() const
    {
        return failed_.load();
    }

private:
    const Role role_;
    const StepClock& clock_;
    CountingAllocator& outside_;
    const std::thread::id owner_;
    FaultInjector* faults_;
    std::atomic<bool> failed_{false};

    mutable std::mutex lock_;
    std::vector<AllocationRecord> records_;
    std::unordered_map<void*, size_t> live_; // pointer -> index in records_
    std::unordered_map<int, int> next_ordinal_; // step -> next ordinal
    bool next_transformed_ = false;             // owner only
};

} // namespace flexnn

#endif // FLEXNN_RECORDING_ALLOCATOR_H
