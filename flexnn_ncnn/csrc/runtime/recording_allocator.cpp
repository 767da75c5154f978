#include "runtime/recording_allocator.h"

#include <new>

#include <algorithm>

namespace flexnn {

RecordingAllocator::RecordingAllocator(Role role, const StepClock& clock, CountingAllocator& outside, FaultInjector* faults)
    : role_(role), clock_(clock), outside_(outside), owner_(std::this_thread::get_id()), faults_(faults)
{
}

RecordingAllocator::~RecordingAllocator()
{
    // buffers still held by layers at teardown go back to the heap; their records stay valid
    for (const auto& kv : live_)
        ncnn::fastFree(kv.first);
}

void* RecordingAllocator::fastMalloc(size_t size)
{
    if (std::this_thread::get_id() != owner_)
        return outside_.fastMalloc(size);
    if (faults_)
    {
        const FaultInjector::Request request = faults_->on_request();
        if (request == FaultInjector::Request::Throw)
            throw std::bad_alloc();
        if (request == FaultInjector::Request::Fail)
            failed_.store(true); // served all the same: NCNN's kernels do not all check an allocation
    }
    void* ptr = ncnn::fastMalloc(size);
    const bool transformed = next_transformed_;
    next_transformed_ = false;
    if (!ptr)
        return ptr;
    std::lock_guard<std::mutex> guard(lock_);
    const int step = clock_.allocation_step();
    AllocationRecord record;
    record.step = step;
    record.role = role_;
    record.ordinal = next_ordinal_[step]++;
    record.size = size;
    record.transformed = transformed;
    live_[ptr] = records_.size();
    records_.push_back(record);
    return ptr;
}

void RecordingAllocator::fastFree(void* ptr)
{
    if (!ptr)
        return;
    if (outside_.owns(ptr))
    {
        outside_.fastFree(ptr);
        return;
    }
    {
        std::lock_guard<std::mutex> guard(lock_);
        auto it = live_.find(ptr);
        if (it != live_.end())
        {
            AllocationRecord& record = records_[it->second];
            record.last_use = std::max(record.step, clock_.release_step());
            if (role_ == Role::Intermediate)
                record.released_before = next_ordinal_[record.step];
            live_.erase(it);
        }
    }
    ncnn::fastFree(ptr);
}

std::vector<AllocationRecord> RecordingAllocator::records() const
{
    std::lock_guard<std::mutex> guard(lock_);
    return records_;
}

} // namespace flexnn
