#ifndef FLEXNN_TENSOR_H
#define FLEXNN_TENSOR_H

#include "runtime/status.h"

#include <mat.h>

#include <vector>

namespace flexnn {

// numpy shape <-> ncnn::Mat, fp32, elempack 1: (w) <-> Mat(w), (h,w) <-> Mat(w,h),
// (c,h,w) <-> Mat(w,h,c), (c,d,h,w) <-> Mat(w,h,d,c). ncnn pads each channel to cstep;
// the numpy side is dense C order; an empty Mat is a (0,) array, as NCNN's python binding gives it.
Status mat_from_dense(const std::vector<int>& shape, const float* data, ncnn::Mat& out);
// the same shape over `data` itself, without copying it: cstep is one channel's elements (numpy's
// dense step, not NCNN's aligned one), so the view is only for clone(), which copies channel by
// channel into NCNN's layout (e.g. straight into an arena); `data` must outlive the view
Status dense_view(const std::vector<int>& shape, const float* data, ncnn::Mat& out);
Status dense_shape(const ncnn::Mat& m, std::vector<int>& shape);
// copies m densely into dst, which holds product(dense_shape(m)) floats
void copy_to_dense(const ncnn::Mat& m, float* dst);

} // namespace flexnn

#endif // FLEXNN_TENSOR_H
