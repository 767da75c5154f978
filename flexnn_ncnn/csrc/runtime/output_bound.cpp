#include "runtime/output_bound.h"

#include "runtime/request_probe.h"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace flexnn {

bool OutputBound::value_dependent(const std::string& type)
{
    return detection_head(type) || type == "Proposal";
}

bool OutputBound::detection_head(const std::string& type)
{
    return type == "DetectionOutput" || type == "Yolov3DetectionOutput" || type == "YoloDetectionOutput";
}

Status OutputBound::for_layer(const std::string& type, const ncnn::ParamDict& pd, OutputBound& out)
{
    out = OutputBound();
    if (type == "DetectionOutput")
    {
        out.kind_ = Kind::DetectionOutput;
        out.num_class_ = pd.get(0, 0);
        out.nms_top_k_ = pd.get(2, 300);
        out.keep_top_k_ = pd.get(3, 100);
        // NCNN resizes its candidate lists to these counts: a negative one is undefined there
        if (out.nms_top_k_ < 0 || out.keep_top_k_ < 0)
            return Status::error("DetectionOutput with a negative nms_top_k (2=) or keep_top_k (3=) has no output bound");
    }
    else if (type == "Yolov3DetectionOutput" || type == "YoloDetectionOutput")
    {
        out.kind_ = Kind::YoloDetectionOutput;
        out.num_box_ = pd.get(1, 5);
    }
    // Proposal: no slot; it creates its rois (4 floats a row, at most after_nms_topN rows) and its
    // candidate lists on the C heap, outside any plan, measured with the rest of the process
    return Status();
}

int OutputBound::max_rows(const std::vector<ncnn::Mat>& bottoms) const
{
    int64_t rows = 0;
    if (kind_ == Kind::DetectionOutput && bottoms.size() >= 3)
    {
        const bool mxnet_ssd_style = num_class_ == -233;
        const int64_t priors = mxnet_ssd_style ? bottoms[2].h : bottoms[2].w / 4;
        const int64_t classes = mxnet_ssd_style ? bottoms[1].h : num_class_;
        // per class (the background excluded) at most nms_top_k survive, then keep_top_k overall
        rows = std::min<int64_t>(keep_top_k_, std::max<int64_t>(classes - 1, 0) * std::min<int64_t>(nms_top_k_, priors));
    }
    else if (kind_ == Kind::YoloDetectionOutput)
    {
        for (const ncnn::Mat& m : bottoms)
            rows += (int64_t)num_box_ * m.w * m.h;
    }
    return (int)std::min<int64_t>(rows, std::numeric_limits<int>::max());
}

bool OutputBound::reads_first_roi(const std::string& type, int bottom)
{
    return bottom == 1 && (type == "ROIPooling" || type == "PSROIPooling" || type == "ROIAlign");
}

size_t OutputBound::max_request_bytes(const std::vector<ncnn::Mat>& bottoms) const
{
    RequestProbe probe;
    ncnn::Mat top;
    top.create(6, std::max(max_rows(bottoms), 1), (size_t)4u, &probe); // as every one of these layers creates it
    return probe.requested;
}

int BoundedTop::reserve(size_t bytes, ncnn::Allocator* from)
{
    release();
    from_ = from ? from : ncnn::get_thread_default_allocator();
    slot_.create((int)bytes, (size_t)1u, from_);
    return slot_.empty() ? -100 : 0;
}

void BoundedTop::release()
{
    slot_.release();
    taken_ = false;
}

void* BoundedTop::fastMalloc(size_t size)
{
    if (!taken_ && size <= slot_.total())
    {
        taken_ = true;
        return slot_.data;
    }
    return from_ ? from_->fastMalloc(size) : ncnn::fastMalloc(size);
}

void BoundedTop::fastFree(void* ptr)
{
    // the slot's bytes are freed with the slot; a Mat on them only lets go of its view
    if (ptr == slot_.data)
        return;
    if (from_)
        from_->fastFree(ptr);
    else
        ncnn::fastFree(ptr);
}

} // namespace flexnn
