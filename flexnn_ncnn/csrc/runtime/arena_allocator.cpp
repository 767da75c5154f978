#include "runtime/arena_allocator.h"

#include <algorithm>
#include <new>

namespace flexnn {

ArenaAllocator::ArenaAllocator(Role role, const StepClock& clock, Failure& failure, CountingAllocator& outside, FaultInjector& faults)
    : role_(role), clock_(clock), failure_(failure), outside_(outside), faults_(faults), owner_(std::this_thread::get_id())
{
}

void ArenaAllocator::bind(unsigned char* base, PlannedBuffers buffers, const StepNamer* step_name, size_t outside_limit,
                          ArenaCanary* canary)
{
    canary_ = base ? canary : nullptr;
    base_ = base;
    buffers_ = std::move(buffers);
    step_namer_ = step_name;
    outside_limit_ = outside_limit;
    next_ordinal_.assign(buffers_.steps(), 0);
    held_.clear();
}

void ArenaAllocator::begin_inference(std::thread::id owner)
{
    owner_.store(owner);
    next_ordinal_.assign(buffers_.steps(), 0);
    served_bytes_ = 0;
    held_.clear();
}

const ArenaAllocator::Held* ArenaAllocator::held_over(int step, uint64_t lo, uint64_t hi)
{
    if (step != held_step_)
    {
        held_.clear();
        held_step_ = step;
    }
    for (const Held& h : held_)
        if (h.lo < hi && lo < h.hi)
            return &h;
    return nullptr;
}

std::string ArenaAllocator::step_name(int step) const
{
    return step_namer_ ? (*step_namer_)(step) : "step " + std::to_string(step);
}

void* ArenaAllocator::serve_outside(size_t size, int step)
{
    size_t live = 0;
    void* ptr = outside_.fastMalloc(size, live);
    if (live > outside_limit_)
        failure_.set(step_name(step) + ": " + std::to_string(size) + " B requested outside the arena (" + role_name(role_)
                     + ") hold " + std::to_string(live) + " B there, beyond the plan's " + std::to_string(outside_limit_)
                     + " B: prepare measured less; prepare the model again for these options");
    return ptr;
}

std::string ArenaAllocator::describe(size_t size, int step, int ordinal) const
{
    return step_name(step) + ": " + role_name(role_) + " " + std::to_string(ordinal) + " of " + std::to_string(size) + " B";
}

const PlannedBuffer* ArenaAllocator::planned_for(size_t size, int step, int ordinal)
{
    const bool known_step = step >= 0 && step < buffers_.steps();
    if (!known_step || ordinal >= buffers_.count(step))
    {
        failure_.set(describe(size, step, ordinal) + " is not in the plan (prepare saw "
                     + std::to_string(known_step ? buffers_.count(step) : 0) + " " + role_name(role_)
                     + " buffers there): the model or its options differ from what was prepared");
        return nullptr;
    }
    const PlannedBuffer& planned = buffers_.at(step, ordinal);
    if (size > planned.size)
    {
        failure_.set(describe(size, step, ordinal) + " is larger than planned (" + std::to_string(planned.size)
                     + " B): the model or its options differ from what was prepared");
        return nullptr;
    }
    return &planned;
}

int ArenaAllocator::take_ordinal(int step)
{
    return step >= 0 && step < buffers_.steps() ? next_ordinal_[step]++ : 0;
}

unsigned char* ArenaAllocator::pass(size_t size)
{
    const int step = clock_.allocation_step();
    const PlannedBuffer* planned = planned_for(size, step, take_ordinal(step));
    return planned && base_ ? base_ + planned->offset : nullptr;
}

void* ArenaAllocator::fastMalloc(size_t size)
{
    const int step = clock_.allocation_step();
    if (std::this_thread::get_id() != owner_.load())
        return serve_outside(size, step);

    const int ordinal = take_ordinal(step);
    switch (faults_.on_request())
    {
    case FaultInjector::Request::Fail:
        // a failed request fails the inference but is served: NCNN's kernels do not all check an
        // allocation (conv3x3s1_winograd63_transform_kernel writes through a null one)
        failure_.set(describe(size, step, ordinal) + " could not be allocated (injected fault)");
        return serve_outside(size, step);
    case FaultInjector::Request::Throw:
        throw std::bad_alloc();
    case FaultInjector::Request::Serve:
        break;
    }
    const PlannedBuffer* planned = planned_for(size, step, ordinal);
    if (!planned || !base_)
        return serve_outside(size, step);
    if (role_ == Role::Intermediate)
    {
        const Held* held = held_over(step, planned->offset, planned->offset + size);
        if (held)
        {
            failure_.set(describe(size, step, ordinal) + " is planned over intermediate " + std::to_string(held->ordinal)
                         + ", which NCNN still holds: the model or its options differ from what was prepared");
            return serve_outside(size, step);
        }
        held_.push_back({planned->offset, planned->offset + size, ordinal});
    }
    unsigned char* ptr = base_ + planned->offset;
    served_bytes_ += size;
    if (canary_)
    {
        const int64_t written = canary_->first_written(planned->offset, size);
        if (written >= 0)
            failure_.set(describe(size, step, ordinal) + " at offset " + std::to_string(planned->offset) + ": its byte " + std::to_string(written)
                         + " was written after the tensor there died, or belongs to one still alive (arena canary): "
                           "the plan's lifetimes are not NCNN's");
        if (role_ != Role::Weight)
            canary_->served(ptr, size);
    }
    return ptr;
}

void ArenaAllocator::fastFree(void* ptr)
{
    if (!ptr)
        return;
    if (role_ == Role::Intermediate && base_ && std::this_thread::get_id() == owner_.load())
    {
        auto held = std::find_if(held_.begin(), held_.end(), [this, ptr](const Held& h) { return base_ + h.lo == ptr; });
        if (held != held_.end())
            held_.erase(held);
    }
    if (canary_ && canary_->released(ptr))
        return;
    if (outside_.owns(ptr))
        outside_.fastFree(ptr);
}

} // namespace flexnn
