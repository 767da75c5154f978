#ifndef FLEXNN_OUTPUT_BOUND_H
#define FLEXNN_OUTPUT_BOUND_H

#include "runtime/status.h"

#include <allocator.h>
#include <mat.h>
#include <paramdict.h>

#include <cstddef>
#include <string>
#include <vector>

namespace flexnn {

// Layers whose output size depends on the values they read, not only on shapes: detection heads
// create their top as (6, detections) after thresholds and NMS, so the size prepare saw is one
// sample. OutputBound holds what bounds it: the most rows the layer's NCNN code can emit for given
// input shapes, from its params (src/layer/detectionoutput.cpp, yolov3detectionoutput.cpp,
// yolodetectionoutput.cpp). Proposal (a two-stage detector's region proposals) has no bound here:
// its rois are not the blob allocator's (src/layer/proposal.cpp), so no plan holds them.
class OutputBound
{
public:
    // whether NCNN's `type` sizes its output by values (bounded or not)
    static bool value_dependent(const std::string& type);
    // whether it is a detection head, whose top the plan holds at its bound
    static bool detection_head(const std::string& type);
    // whether a layer of `type` reading rois as its bottom `bottom` sizes its output by its other
    // input's shape alone: NCNN's ROI layers pool the first roi only
    static bool reads_first_roi(const std::string& type, int bottom);
    // the bound of a layer of `type` with params `pd`; an error for a value-dependent type without
    // one; unbounded() for every other type
    static Status for_layer(const std::string& type, const ncnn::ParamDict& pd, OutputBound& out);

    bool bounded() const
    {
        return kind_ != Kind::None;
    }
    // the bytes NCNN requests from its blob allocator for the largest top these inputs can give
    size_t max_request_bytes(const std::vector<ncnn::Mat>& bottoms) const;

private:
    enum class Kind
    {
        None,
        DetectionOutput,       // SSD: keep_top_k of (classes - 1) x min(nms_top_k, priors)
        YoloDetectionOutput,   // YOLOv2 and v3: one row per anchor box per cell at most
    };
    int max_rows(const std::vector<ncnn::Mat>& bottoms) const;

    Kind kind_ = Kind::None;
    int num_class_ = 0;
    int nms_top_k_ = 0;
    int keep_top_k_ = 0;
    int num_box_ = 0;
};

// The blob allocator a bounded layer computes with: one slot of the bound's size, taken from the
// real blob allocator before every forward whatever the layer then detects, so the plan sees the
// same request (size, ordinal) at prepare and at every run. The first request that fits is served
// from the slot, the others pass through. The slot is held until the inference ends (release),
// since the layer's top may be empty (nothing detected) or replaced by a view of it.
class BoundedTop : public ncnn::Allocator
{
public:
    // take a slot of `bytes` from `from` (null: the thread's default allocator); 0 on success
    int reserve(size_t bytes, ncnn::Allocator* from);
    void release();

    void* fastMalloc(size_t size) override;
    void fastFree(void* ptr) override;

private:
    ncnn::Mat slot_;
    ncnn::Allocator* from_ = nullptr;
    bool taken_ = false;
};

} // namespace flexnn

#endif // FLEXNN_OUTPUT_BOUND_H
