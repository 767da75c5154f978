#ifndef FLEXNN_READ_ONLY_INPUT_H
#define FLEXNN_READ_ONLY_INPUT_H

#include "runtime/status.h"

#include <mat.h>

namespace flexnn {

// Whether NCNN can read `m` where it lies instead of a copy of it: unpacked fp32 of 3 or 4 dims (one batch) whose
// channel planes are whole multiples of 16 bytes (NCNN's own cstep is then the dense plane) starting
// 16-byte aligned (what NCNN's cstep guarantees every channel), with the NCNN_MALLOC_OVERREAD bytes
// after it mapped (kernels may read them, as in NCNN's own allocations). Decided by the shape and the
// address; prepare records which inputs it read in place, and the run reads those in place only.
bool reads_in_place(const ncnn::Mat& m);

// The caller's input as NCNN reads it in place, never written nor freed: its headers share a reference
// count NCNN never sees at one, so a layer that would compute in place on it clones it first (net.cpp:
// "deep copy for inplace forward if data is shared") and no release frees it. Every header mat() gave
// must be released before this object is destroyed (the inference holding them ends first).
class ReadOnlyInput
{
public:
    // `view` must satisfy reads_in_place and outlive this object
    explicit ReadOnlyInput(const ncnn::Mat& view);
    ReadOnlyInput(const ReadOnlyInput&) = delete;
    ReadOnlyInput& operator=(const ReadOnlyInput&) = delete;

    // a header over the caller's bytes, holding one reference
    ncnn::Mat mat();
    // whether any header mat() gave is still held (by NCNN's blobs, a layer, an output)
    bool held() const;

private:
    const ncnn::Mat view_; // the caller's header (a reference on its count, if it has one)
    int references_; // 1 (this object's, never released) + one per header held
};

} // namespace flexnn

#endif // FLEXNN_READ_ONLY_INPUT_H
