#ifndef FLEXNN_REQUEST_PROBE_H
#define FLEXNN_REQUEST_PROBE_H

#include <allocator.h>

#include <cstddef>

namespace flexnn {

// Records the size of the one request a Mat::create (or clone) makes, and serves none: NCNN itself
// says how many bytes a shape takes (alignment, refcount), so no formula of ours can drift from it.
class RequestProbe : public ncnn::Allocator
{
public:
    void* fastMalloc(size_t size) override
    {
        requested = size;
        return nullptr;
    }
    void fastFree(void*) override
    {
    }

    size_t requested = 0;
};

} // namespace flexnn

#endif // FLEXNN_REQUEST_PROBE_H
