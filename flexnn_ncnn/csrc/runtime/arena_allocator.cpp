#include "runtime/arena_allocator.h"

namespace flexnn {

ArenaAllocator::ArenaAllocator(Role role, const StepClock& clock, Failure& failure, CountingAllocator& outside)
    : role_(role), clock_(clock), failure_(failure), outside_(outside), owner_(std::this_thread::get_id())
{
}

void ArenaAllocator::bind(unsigned char* base, PlannedBuffers buffers, const std::vector<std::string>* step_names)
{
    base_ = base;
    buffers_ = std::move(buffers);
    step_names_ = step_names;
    next_ordinal_.assign(buffers_.size(), 0);
}

void ArenaAllocator::begin_inference(std::thread::id owner)
{
    owner_.store(owner);
    next_ordinal_.assign(buffers_.size(), 0);
}

void* ArenaAllocator::fastMalloc(size_t size)
{
    if (std::this_thread::get_id() != owner_.load())
        return outside_.fastMalloc(size);

    const int step = clock_.allocation_step();
    const bool known_step = step >= 0 && step < (int)buffers_.size();
    const int ordinal = known_step ? next_ordinal_[step]++ : 0;
    auto describe = [&] {
        const std::string where = known_step && step_names_ ? (*step_names_)[step] : "step " + std::to_string(step);
        return where + ": " + role_name(role_) + " " + std::to_string(ordinal) + " of " + std::to_string(size) + " B";
    };
    if (!known_step || ordinal >= (int)buffers_[step].size())
    {
        failure_.set(describe() + " is not in the plan (prepare saw "
                     + std::to_string(known_step ? buffers_[step].size() : 0) + " " + role_name(role_)
                     + " buffers there): the model or its options differ from what was prepared");
        return outside_.fastMalloc(size);
    }
    const PlannedBuffer& planned = buffers_[step][ordinal];
    if (size > planned.size)
    {
        failure_.set(describe() + " is larger than planned (" + std::to_string(planned.size)
                     + " B): the model or its options differ from what was prepared");
        return outside_.fastMalloc(size);
    }
    return base_ ? base_ + planned.offset : outside_.fastMalloc(size);
}

void ArenaAllocator::fastFree(void* ptr)
{
    if (ptr && outside_.owns(ptr))
        outside_.fastFree(ptr);
}

} // namespace flexnn
