#include "runtime/planned_layer.h"

#include "runtime/thread_allocator_scope.h"
#include "runtime/transformed_weights.h"

#include <datareader.h>
#include <layer_type.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace flexnn {

namespace {

// `opt` with the kernels NCNN would choose over the direct one turned off, when `direct`
ncnn::Option kernel_option(const ncnn::Option& opt, bool direct)
{
    ncnn::Option o = opt;
    if (direct)
    {
        o.use_winograd_convolution = false;
        o.use_sgemm_convolution = false;
    }
    return o;
}

enum FlagBit : uint32_t
{
    kOneBlobOnly = 1u << 0,
    kInplace = 1u << 1,
    kPacking = 1u << 2,
    kBf16 = 1u << 3,
    kFp16 = 1u << 4,
    kInt8 = 1u << 5,
    kTensorStorage = 1u << 6,
    kAnyPacking = 1u << 7,
    kBatch = 1u << 8,
};

// what has NCNN's Net convert a layer's bottoms before its forward
constexpr uint32_t kLayoutFlags = kPacking | kAnyPacking | kBf16 | kFp16 | kInt8 | kTensorStorage;

#if NCNN_BATCH
// The batch NCNN's Net loops over for a layer that does not take batches: the first batched input's
// (Net::do_forward_layer), 1 for none
int batch_of(const std::vector<ncnn::Mat>& blobs)
{
    for (const ncnn::Mat& m : blobs)
        if (m.n > 1)
            return m.n;
    return 1;
}

// Net::do_forward_layer's loop for a layer without batch support: `forward_item` (the layer's forward
// on item b's bottoms, unbatched inputs whole) once per item, each item's tops copied into tops of
// the whole batch, made after the first item's; -1 where the batched inputs' counts differ
template<typename ForwardItem>
int forward_per_item(const std::vector<ncnn::Mat>& bottoms, std::vector<ncnn::Mat>& tops, int batch, const ncnn::Option& opt,
                     ForwardItem&& forward_item)
{
    for (const ncnn::Mat& m : bottoms)
        if (m.n > 1 && m.n != batch)
            return -1;
    std::vector<ncnn::Mat> whole(tops.size());
    for (int b = 0; b < batch; b++)
    {
        std::vector<ncnn::Mat> item_bottoms(bottoms.size());
        for (size_t i = 0; i < bottoms.size(); i++)
            item_bottoms[i] = bottoms[i].n > 1 ? bottoms[i].batch(b) : bottoms[i];
        std::vector<ncnn::Mat> item_tops(tops.size());
        int ret = forward_item(item_bottoms, item_tops);
        if (ret != 0)
            return ret;
        for (size_t i = 0; i < tops.size(); i++)
        {
            if (b == 0)
            {
                whole[i].create_like(item_tops[i], batch, opt.blob_allocator);
                if (whole[i].empty())
                    return -100;
            }
            memcpy(whole[i].batch(b), item_tops[i], item_tops[i].total() * item_tops[i].elemsize);
        }
    }
    tops = whole;
    return 0;
}
#endif // NCNN_BATCH

} // namespace

uint32_t layer_flags(const ncnn::Layer& layer)
{
    return (layer.one_blob_only ? kOneBlobOnly : 0u) | (layer.support_inplace ? kInplace : 0u)
           | (layer.support_packing ? kPacking : 0u) | (layer.support_bf16_storage ? kBf16 : 0u)
           | (layer.support_fp16_storage ? kFp16 : 0u) | (layer.support_int8_storage ? kInt8 : 0u)
           | (layer.support_tensor_storage ? kTensorStorage : 0u) | (layer.support_any_packing ? kAnyPacking : 0u)
           | (layer.support_batch ? kBatch : 0u);
}

ncnn::Layer* create_real_layer(int typeindex, const ncnn::ParamDict& pd)
{
    return pd.get(kReferenceLayerParam, 0) ? ncnn::create_layer_naive(typeindex) : ncnn::create_layer_cpu(typeindex);
}

int LayerParams::read(const ncnn::DataReader& dr)
{
    ThreadAllocatorScope heap(nullptr);
    return load_param(dr);
}

Status LayerParams::parse(const std::string& text, const std::string& layer_name)
{
    const unsigned char* mem = reinterpret_cast<const unsigned char*>(text.c_str());
    ncnn::DataReaderFromMemory dr(mem);
    if (read(dr) != 0)
        return Status::error("layer " + layer_name + ": cannot read its params '" + text + "'");
    return Status();
}

PlannedLayer::PlannedLayer(const ncnn::Layer& stock, uint32_t flags, std::string params, int layer_index, ComputeHooks* hooks,
                           const std::vector<ncnn::Blob>& blobs, bool as_given)
    : params_(std::move(params)), layer_index_(layer_index), hooks_(hooks), blobs_(blobs),
      bounded_(OutputBound::detection_head(stock.type) ? new Bounded : nullptr), as_given_(as_given)
{
    typeindex = stock.typeindex;
    type = stock.type;
    name = stock.name;
    bottoms = stock.bottoms;
    tops = stock.tops;
    featmask = stock.featmask;
    support_vulkan = false;
    set_flags(as_given_ ? flags & ~kLayoutFlags : flags);
}

PlannedLayer::~PlannedLayer()
{
    if (real_)
        unload(ncnn::Option());
}

void PlannedLayer::set_flags(uint32_t flags)
{
    one_blob_only = flags & kOneBlobOnly;
    support_inplace = flags & kInplace;
    support_packing = flags & kPacking;
    support_bf16_storage = flags & kBf16;
    support_fp16_storage = flags & kFp16;
    support_int8_storage = flags & kInt8;
    support_tensor_storage = flags & kTensorStorage;
    support_any_packing = flags & kAnyPacking;
    // the Net hands this layer whole batches: a real layer without batch support runs once per item
    // within this layer's one step (forward), where the Net would make each item a computation of its own
    support_batch = NCNN_BATCH || (flags & kBatch);
}

uint32_t PlannedLayer::loaded_flags() const
{
    return real_ ? layer_flags(*real_) & (as_given_ ? ~kLayoutFlags : ~0u) : 0u;
}

Status PlannedLayer::load(const ncnn::ModelBin& mb, const ncnn::Option& opt, ncnn::TransformedWeightStore* store)
{
    try
    {
        return build(mb, opt, store);
    }
    catch (const std::exception& e)
    {
        unload(opt);
        return Status::error("layer " + name + ": building it threw " + e.what());
    }
}

Status PlannedLayer::build(const ncnn::ModelBin& mb, const ncnn::Option& opt, ncnn::TransformedWeightStore* store)
{
    unload(opt);
    LayerParams pd;
    Status s = pd.parse(params_, name);
    if (!s.ok())
        return s;
    std::unique_ptr<ncnn::Layer> layer(create_real_layer(typeindex, pd));
    if (!layer)
        return Status::error("layer " + name + ": NCNN has no CPU layer of type " + type);
    layer->typeindex = typeindex;
    layer->type = type;
    layer->name = name;
    layer->bottoms = bottoms;
    layer->tops = tops;
    // the shape hints as Net::load_param gives a CPU layer: its blobs' shapes
    for (int b : bottoms)
        layer->bottom_shapes.push_back(blobs_[b].shape);
    for (int t : tops)
        layer->top_shapes.push_back(blobs_[t].shape);
    layer->featmask = featmask;
    if (layer->load_param(pd) != 0)
        return Status::error("layer " + name + ": load_param failed");
    direct_ = typeindex == ncnn::LayerType::Convolution && pd.get(kKernelTypeParam, 0) == kDirectKernel;
    const ncnn::Option layer_opt = kernel_option(opt, direct_);
    if (bounded_)
    {
        s = OutputBound::for_layer(type, pd, bounded_->bound);
        if (!s.ok())
            return Status::error("layer " + name + ": " + s.message());
    }
    TransformedStoreScope scope(store);
    if (layer->load_model(mb) != 0)
        return Status::error("layer " + name + ": load_model failed");
    int created = -1;
    try
    {
        created = layer->create_pipeline(layer_opt);
    }
    catch (...)
    {
        layer->destroy_pipeline(layer_opt); // what it made before throwing
        throw;
    }
    if (created != 0)
    {
        layer->destroy_pipeline(layer_opt);
        return Status::error("layer " + name + ": create_pipeline failed");
    }
    // NCNN reads shape hints in create_pipeline only (Convolution's kernel choice): the next load sets them again
    std::vector<ncnn::Mat>().swap(layer->bottom_shapes);
    std::vector<ncnn::Mat>().swap(layer->top_shapes);
    real_ = std::move(layer);
    return Status();
}

void PlannedLayer::unload(const ncnn::Option& opt)
{
    if (!real_)
        return;
    real_->destroy_pipeline(opt);
    real_.reset();
}

int PlannedLayer::destroy_pipeline(const ncnn::Option& opt)
{
    unload(opt);
    return 0;
}

void PlannedLayer::release_bounded_top()
{
    if (bounded_)
        bounded_->top.release();
}

template<typename Compute>
int PlannedLayer::compute(const std::vector<ncnn::Mat>* bottoms, const ncnn::Option& net_opt, Compute&& compute) const
{
    // waits for this layer's load: what build set (real_, direct_) is read after it
    int ret = hooks_->before_compute(layer_index_);
    if (ret != 0)
        return hooks_->after_compute(layer_index_, ret);
    const ncnn::Option opt = kernel_option(net_opt, direct_);
    // NCNN returns its errors, but what it calls may throw (std::bad_alloc): never through NCNN's frames
    try
    {
        if (!bounded_ || !bounded_->bound.bounded() || !bottoms)
            return hooks_->after_compute(layer_index_, compute(opt));
#if NCNN_BATCH
        // its one slot serves one request: items of a batch would each make one, sized by their values
        if (batch_of(*bottoms) > 1)
            return hooks_->raised(layer_index_, "a batched input to a layer whose output size depends on values is not supported");
#endif
        ncnn::Option bounded_opt = opt;
        bounded_opt.blob_allocator = &bounded_->top;
        ret = bounded_->top.reserve(bounded_->bound.max_request_bytes(*bottoms), opt.blob_allocator);
        if (ret == 0)
            ret = compute(bounded_opt);
    }
    catch (const std::exception& e)
    {
        return hooks_->raised(layer_index_, e.what());
    }
    return hooks_->after_compute(layer_index_, ret);
}

int PlannedLayer::forward(const std::vector<ncnn::Mat>& bottom_blobs, std::vector<ncnn::Mat>& top_blobs, const ncnn::Option& opt) const
{
    return compute(&bottom_blobs, opt, [&](const ncnn::Option& o) {
#if NCNN_BATCH
        const int batch = batch_of(bottom_blobs);
        if (batch > 1 && !real_->support_batch)
            return forward_per_item(bottom_blobs, top_blobs, batch, o, [&](const std::vector<ncnn::Mat>& b, std::vector<ncnn::Mat>& t) {
                return real_->forward(b, t, o);
            });
#endif
        return real_->forward(bottom_blobs, top_blobs, o);
    });
}

int PlannedLayer::forward(const ncnn::Mat& bottom_blob, ncnn::Mat& top_blob, const ncnn::Option& opt) const
{
    return compute(nullptr, opt, [&](const ncnn::Option& o) {
#if NCNN_BATCH
        if (bottom_blob.n > 1 && !real_->support_batch)
        {
            std::vector<ncnn::Mat> tops(1);
            int ret = forward_per_item({bottom_blob}, tops, bottom_blob.n, o, [&](const std::vector<ncnn::Mat>& b, std::vector<ncnn::Mat>& t) {
                return real_->forward(b[0], t[0], o);
            });
            top_blob = tops[0];
            return ret;
        }
#endif
        return real_->forward(bottom_blob, top_blob, o);
    });
}

int PlannedLayer::forward_inplace(std::vector<ncnn::Mat>& bottom_top_blobs, const ncnn::Option& opt) const
{
    return compute(&bottom_top_blobs, opt, [&](const ncnn::Option& o) {
#if NCNN_BATCH
        // the Net runs a layer without batch support out of place on batches, whatever it supports,
        // with as many tops as the layer has; it then reads them from the first bottom_top_blobs
        const int batch = batch_of(bottom_top_blobs);
        if (batch > 1 && !real_->support_batch)
        {
            std::vector<ncnn::Mat> batch_tops(tops.size());
            int ret = forward_per_item(bottom_top_blobs, batch_tops, batch, o,
                                       [&](const std::vector<ncnn::Mat>& b, std::vector<ncnn::Mat>& t) { return real_->forward(b, t, o); });
            std::copy(batch_tops.begin(), batch_tops.end(), bottom_top_blobs.begin());
            return ret;
        }
#endif
        return real_->forward_inplace(bottom_top_blobs, o);
    });
}

int PlannedLayer::forward_inplace(ncnn::Mat& bottom_top_blob, const ncnn::Option& opt) const
{
    return compute(nullptr, opt, [&](const ncnn::Option& o) {
#if NCNN_BATCH
        if (bottom_top_blob.n > 1 && !real_->support_batch)
        {
            for (int b = 0; b < bottom_top_blob.n; b++)
            {
                ncnn::Mat item = bottom_top_blob.batch(b);
                int ret = real_->forward_inplace(item, o);
                if (ret != 0)
                    return ret;
            }
            return 0;
        }
#endif
        return real_->forward_inplace(bottom_top_blob, o);
    });
}

} // namespace flexnn
