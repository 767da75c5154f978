#ifndef FLEXNN_NPY_H
#define FLEXNN_NPY_H

#include "runtime/status.h"

#include <mat.h>

#include <string>

namespace flexnn {

// .npy files of little-endian float32 in C order, 1 to 4 dimensions (see tensor.h for the mapping):
// how device binaries take inputs and give outputs that numpy reads and writes directly.
Status read_npy(const std::string& path, ncnn::Mat& out);
Status write_npy(const std::string& path, const ncnn::Mat& m);

} // namespace flexnn

#endif // FLEXNN_NPY_H
