#include "runtime/read_only_input.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace flexnn {

namespace {

// NCNN's kernels may read up to NCNN_MALLOC_OVERREAD bytes past a buffer (allocator.h), which NCNN's
// own allocations leave room for: those bytes must be mapped, in the data's last page or the next one
bool readable_past_end(const ncnn::Mat& m)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t end = (uintptr_t)m.data + m.total() * m.elemsize;
    const uintptr_t last = (end - 1) / page, reached = (end + NCNN_MALLOC_OVERREAD - 1) / page;
    unsigned char resident[1];
    return reached == last || mincore((void*)(reached * page), page, resident) == 0; // ENOMEM: not mapped
}

} // namespace

bool reads_in_place(const ncnn::Mat& m)
{
    const size_t plane_bytes = (size_t)m.w * m.h * m.d * m.elemsize;
    return m.dims >= 3 && m.n == 1 && m.elemsize == 4u && m.elempack == 1 && plane_bytes % 16 == 0 && m.cstep * m.elemsize == plane_bytes
           && (uintptr_t)m.data % 16 == 0 && readable_past_end(m);
}

ReadOnlyInput::ReadOnlyInput(const ncnn::Mat& view)
    : view_(view), references_(1)
{
}

ncnn::Mat ReadOnlyInput::mat()
{
    // the header built field by field: copying view_ would take a reference on the caller's count
    ncnn::Mat m;
    m.data = view_.data;
    m.elemsize = view_.elemsize;
    m.elempack = view_.elempack;
    m.dims = view_.dims;
    m.w = view_.w;
    m.h = view_.h;
    m.d = view_.d;
    m.c = view_.c;
    m.cstep = view_.cstep;
    NCNN_XADD(&references_, 1);
    m.refcount = &references_;
    return m;
}

bool ReadOnlyInput::held() const
{
    return NCNN_XADD(const_cast<int*>(&references_), 0) > 1;
}

} // namespace flexnn
