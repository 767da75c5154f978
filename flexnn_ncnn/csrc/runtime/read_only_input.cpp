#include "runtime/read_only_input.h"

#include <cstdint>

namespace flexnn {

bool reads_in_place(const ncnn::Mat& m)
{
    const size_t plane_bytes = (size_t)m.w * m.h * m.d * m.elemsize;
    return m.dims >= 3 && m.elemsize == 4u && m.elempack == 1 && plane_bytes % 16 == 0 && m.cstep * m.elemsize == plane_bytes
           && (uintptr_t)m.data % 16 == 0;
}

ReadOnlyInput::ReadOnlyInput(const ncnn::Mat& view)
    : view_(view), references_(1)
{
}

ncnn::Mat ReadOnlyInput::mat()
{
    ncnn::Mat m = view_;
    NCNN_XADD(&references_, 1);
    m.refcount = &references_;
    return m;
}

bool ReadOnlyInput::held() const
{
    return NCNN_XADD(const_cast<int*>(&references_), 0) > 1;
}

} // namespace flexnn
