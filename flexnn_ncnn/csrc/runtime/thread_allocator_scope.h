#ifndef FLEXNN_THREAD_ALLOCATOR_SCOPE_H
#define FLEXNN_THREAD_ALLOCATOR_SCOPE_H

#include <allocator.h>

namespace flexnn {

// While alive, Mats created without an allocator on this thread (weights in load_model, their
// transformed copies in create_pipeline) come from `allocator` (ncnn_patches/0001).
// Restores whatever was routed before, so scopes nest.
class ThreadAllocatorScope
{
public:
    explicit ThreadAllocatorScope(ncnn::Allocator* allocator)
        : previous_(ncnn::set_thread_default_allocator(allocator))
    {
    }
    ~ThreadAllocatorScope()
    {
        ncnn::set_thread_default_allocator(previous_);
    }
    ThreadAllocatorScope(const ThreadAllocatorScope&) = delete;
    ThreadAllocatorScope& operator=(const ThreadAllocatorScope&) = delete;

private:
    ncnn::Allocator* previous_;
};

} // namespace flexnn

#endif // FLEXNN_THREAD_ALLOCATOR_SCOPE_H
