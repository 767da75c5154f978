#ifndef FLEXNN_PLANNED_LAYER_H
#define FLEXNN_PLANNED_LAYER_H

#include "runtime/output_bound.h"
#include "runtime/status.h"

#include <blob.h>
#include <datareader.h>
#include <layer.h>
#include <modelbin.h>
#include <paramdict.h>

#include <cstdint>
#include <memory>
#include <string>

namespace flexnn {

// What the runtime does around each layer's computation (the executor's schedule, or prepare's
// recording). Both run on the thread that computes; a nonzero return stops the inference.
class ComputeHooks
{
public:
    virtual ~ComputeHooks() = default;
    virtual int before_compute(int layer_index) = 0;
    virtual int after_compute(int layer_index, int ret) = 0;
    // the layer threw instead of returning (std::bad_alloc, ...): by default a failed computation
    virtual int raised(int layer_index, const std::string& what)
    {
        (void)what;
        return after_compute(layer_index, -1);
    }
};

// The support_* / one_blob_only flags NCNN reads from a layer to convert its inputs, as bits.
uint32_t layer_flags(const ncnn::Layer& layer);

// A layer's params parsed by NCNN's own reader from their .param text ("0=64 1=3 -23303=2,1,2").
// Array params are Mats: they come from the heap, never from the thread's default allocator.
// A layer whose params set this id to 1 is built as NCNN's reference (unpacked) layer, not its CPU
// one: the slicer so marks the Crop and Concat of int8 blobs, whose packs NCNN's CPU Crop and Concat
// read as floats, while the reference ones copy elements of any size (the Net unpacks their inputs)
const int kReferenceLayerParam = 29; // slicing/rewrite.py REFERENCE_LAYER_ID
// A Convolution whose params set this id (patch 0002's kernel_type) to kDirectKernel is built and run
// with Winograd and im2col+GEMM off, so NCNN runs its direct kernel, as the slicer chose and measured
const int kKernelTypeParam = 26;  // slicing/rewrite.py KERNEL_PARAM_ID
const int kDirectKernel = 1;      // slicing/rewrite.py KERNEL_CODES["direct"]

// The NCNN layer a PlannedLayer builds for `pd`: the reference layer where kReferenceLayerParam asks
// for it, else the CPU one; null where this build has none of that type
ncnn::Layer* create_real_layer(int typeindex, const ncnn::ParamDict& pd);

class LayerParams : public ncnn::ParamDict
{
public:
    // from `dr` up to the next layer's type, which it stops at without consuming; 0 on success
    int read(const ncnn::DataReader& dr);
    Status parse(const std::string& text, const std::string& layer_name);
};

// Stands in the Net for one layer, so that the runtime decides when its weights exist. It holds
// the text of the layer's params (a parsed ParamDict is some 3.6 KB per layer, the text tens of
// bytes) and builds the real (arch-optimised) layer afresh on every load: its params parsed, load_param,
// load_model from a ModelBin, create_pipeline, all on the calling thread, so Mats created without
// an allocator land wherever that thread's default allocator (ncnn_patches/0001) puts them, and
// transformed weights come from (or go to) the thread's store (ncnn_patches/0003).
// forward delegates to the real layer between the hooks; a batched input (NCNN_BATCH) of a real layer
// without batch support runs once per item there, as NCNN's Net would run it, within this one step.
// NCNN reads this layer's flags before
// forward, possibly before the load: they are set once (set_flags) and every load must give the
// same ones.
class PlannedLayer : public ncnn::Layer
{
public:
    // stock: the layer as the Net parsed it (its type, name, blobs); flags: the real layer's after
    // load_param (layer_flags); params: the layer's param text, which LayerParams::parse accepted;
    // blobs: the Net's, whose shape hints each load hands the real layer (the Net outlives this layer);
    // as_given: the layer takes its bottoms in the layout and storage they come in, whatever the real
    // layer supports (a Split of rois: NCNN would pack them by their count)
    PlannedLayer(const ncnn::Layer& stock, uint32_t flags, std::string params, int layer_index, ComputeHooks* hooks,
                 const std::vector<ncnn::Blob>& blobs, bool as_given = false);
    ~PlannedLayer() override;

    // Net::clear() calls this: drop the real layer
    int destroy_pipeline(const ncnn::Option& opt) override;

    int forward(const std::vector<ncnn::Mat>& bottom_blobs, std::vector<ncnn::Mat>& top_blobs, const ncnn::Option& opt) const override;
    int forward(const ncnn::Mat& bottom_blob, ncnn::Mat& top_blob, const ncnn::Option& opt) const override;
    int forward_inplace(std::vector<ncnn::Mat>& bottom_top_blobs, const ncnn::Option& opt) const override;
    int forward_inplace(ncnn::Mat& bottom_top_blob, const ncnn::Option& opt) const override;

    // Build the real layer from its params and `mb` (the previous one is destroyed first); `store`,
    // when not null, is the thread's TransformedWeightStore while it builds.
    Status load(const ncnn::ModelBin& mb, const ncnn::Option& opt, ncnn::TransformedWeightStore* store = nullptr);
    void unload(const ncnn::Option& opt);
    // whether the real layer exists (loaded and not unloaded since)
    bool built() const
    {
        return real_ != nullptr;
    }
    // the real layer's flags after its last load
    uint32_t loaded_flags() const;
    void set_flags(uint32_t flags);
    // let go of the slot a value-dependent layer's top was planned in (OutputBound): at the end of
    // every inference, once its outputs are copied out
    void release_bounded_top();

private:
    // load, which turns what this throws (std::bad_alloc) into an error
    Status build(const ncnn::ModelBin& mb, const ncnn::Option& opt, ncnn::TransformedWeightStore* store);
    // forward through `compute` with the blob allocator a bounded layer needs
    template<typename Compute>
    int compute(const std::vector<ncnn::Mat>* bottoms, const ncnn::Option& opt, Compute&& compute) const;

    // a value-dependent layer's bound (of the real layer's params, set by load) and the slot its top
    // is served from, held from the forward to the end of the inference
    struct Bounded
    {
        OutputBound bound;
        BoundedTop top;
    };

    const std::string params_;
    const int layer_index_;
    ComputeHooks* const hooks_;
    const std::vector<ncnn::Blob>& blobs_;
    std::unique_ptr<ncnn::Layer> real_;
    bool direct_ = false; // its params ask for the direct kernel (set by load, read by forward)
    const std::unique_ptr<Bounded> bounded_; // null for a layer whose output size is its inputs' alone
    const bool as_given_;
};

} // namespace flexnn

#endif // FLEXNN_PLANNED_LAYER_H
