#include "runtime/tensor.h"

#include <cstring>
#include <string>

namespace flexnn {

namespace {

Status check_dense_shape(const std::vector<int>& shape)
{
    for (int d : shape)
        if (d <= 0)
            return Status::error("tensor has an empty dimension");
    if (shape.empty() || shape.size() > 4)
        return Status::error("tensor must have 1 to 4 dimensions, has " + std::to_string(shape.size()));
    return Status();
}

// ncnn::Mat(w, ...) over data (null: allocated by create) in the dims numpy's shape reverses
ncnn::Mat mat_of_shape(const std::vector<int>& shape, float* data)
{
    switch (shape.size())
    {
    case 1: return data ? ncnn::Mat(shape[0], data) : ncnn::Mat(shape[0]);
    case 2: return data ? ncnn::Mat(shape[1], shape[0], data) : ncnn::Mat(shape[1], shape[0]);
    case 3: return data ? ncnn::Mat(shape[2], shape[1], shape[0], data) : ncnn::Mat(shape[2], shape[1], shape[0]);
    default: return data ? ncnn::Mat(shape[3], shape[2], shape[1], shape[0], data) : ncnn::Mat(shape[3], shape[2], shape[1], shape[0]);
    }
}

} // namespace

Status mat_from_dense(const std::vector<int>& shape, const float* data, ncnn::Mat& out)
{
    Status valid = check_dense_shape(shape);
    if (!valid.ok())
        return valid;
    out = mat_of_shape(shape, nullptr);
    if (out.empty())
        return Status::error("out of memory for a tensor");
    const size_t plane = (size_t)out.w * out.h * out.d;
    for (int q = 0; q < out.c; q++)
        memcpy(out.channel(q), data + plane * q, plane * sizeof(float));
    return Status();
}

Status dense_view(const std::vector<int>& shape, const float* data, ncnn::Mat& out)
{
    Status valid = check_dense_shape(shape);
    if (!valid.ok())
        return valid;
    out = mat_of_shape(shape, const_cast<float*>(data)); // never written through: clone() only reads it
    out.cstep = (size_t)out.w * out.h * out.d;
    return Status();
}

Status dense_shape(const ncnn::Mat& m, std::vector<int>& shape)
{
    if (m.empty()) // NCNN's output when there is nothing to give (a detection layer that found nothing)
    {
        shape = {0};
        return Status();
    }
    if (m.elemsize != 4u || m.elempack != 1)
        return Status::error("tensor is not unpacked fp32 (elemsize " + std::to_string(m.elemsize) + ", elempack " + std::to_string(m.elempack) + ")");
    switch (m.dims)
    {
    case 1: shape = {m.w}; break;
    case 2: shape = {m.h, m.w}; break;
    case 3: shape = {m.c, m.h, m.w}; break;
    case 4: shape = {m.c, m.d, m.h, m.w}; break;
    default: return Status::error("tensor has " + std::to_string(m.dims) + " dimensions");
    }
    return Status();
}

void copy_to_dense(const ncnn::Mat& m, float* dst)
{
    if (m.empty())
        return;
    const size_t plane = (size_t)m.w * m.h * m.d;
    for (int q = 0; q < m.c; q++)
        memcpy(dst + plane * q, m.channel(q), plane * sizeof(float));
}

} // namespace flexnn
