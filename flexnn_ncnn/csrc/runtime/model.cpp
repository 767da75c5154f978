#include "runtime/model.h"

#include "runtime/heap_policy.h"
#include "runtime/text_file.h"

#include <algorithm>

#include <datareader.h>
#include <layer_type.h>


namespace flexnn {

namespace {

// Each layer's param text, read again from the .param the Net already accepted (the Net keeps only
// the layers built from them; a PlannedLayer parses its text again on every load) and checked by
// parsing it once here.
Status read_layer_params(const std::string& path, int layer_count, std::vector<std::string>& params)
{
    std::string text;
    Status read = read_text_file(path, text);
    if (!read.ok())
        return read;
    const unsigned char* mem = reinterpret_cast<const unsigned char*>(text.c_str());
    ncnn::DataReaderFromMemory dr(mem);
    int magic = 0, layers = 0, blobs = 0;
    if (dr.scan("%d", &magic) != 1 || dr.scan("%d", &layers) != 1 || dr.scan("%d", &blobs) != 1 || layers != layer_count)
        return Status::error(path + ": cannot read the layer count again");
    params.resize(layer_count);
    for (int i = 0; i < layer_count; i++)
    {
        char type[256], name[256], blob[256];
        int bottom_count = 0, top_count = 0;
        if (dr.scan("%255s", type) != 1 || dr.scan("%255s", name) != 1 || dr.scan("%d", &bottom_count) != 1
                || dr.scan("%d", &top_count) != 1)
            return Status::error(path + ": cannot read layer " + std::to_string(i) + " again");
        for (int j = 0; j < bottom_count + top_count; j++)
            if (dr.scan("%255s", blob) != 1)
                return Status::error(path + ": cannot read the blobs of layer " + std::to_string(i) + " again");
        // the params run up to the next layer's type, which their reader stops at without consuming it
        const unsigned char* begin = mem;
        LayerParams pd;
        if (pd.read(dr) != 0)
            return Status::error(path + ": cannot read the params of layer " + std::to_string(i) + " again");
        params[i].assign(reinterpret_cast<const char*>(begin), reinterpret_cast<const char*>(mem));
    }
    return Status();
}

// Whether what reads `blob` sizes its buffers by the blob's shape alone, though the blob's size
// depends on values: nothing reads it (it leaves the model) or, for rois, a ROI layer pools the first
// one, or a Split passes them on (`splits` gets its index: it must take them as they are, since NCNN
// would convert them to a packed layout by their count).
bool read_by_shape_alone(const ncnn::Net& net, int blob, bool rois, std::string& reader, std::vector<int>& splits)
{
    const int consumer = net.blobs()[blob].consumer;
    if (consumer < 0)
        return true;
    const ncnn::Layer& layer = *net.layers()[consumer];
    if (rois && layer.type == "Split")
    {
        splits.push_back(consumer);
        for (int top : layer.tops)
            if (!read_by_shape_alone(net, top, rois, reader, splits))
                return false;
        return true;
    }
    const int bottom = (int)(std::find(layer.bottoms.begin(), layer.bottoms.end(), blob) - layer.bottoms.begin());
    if (rois && OutputBound::reads_first_roi(layer.type, bottom))
        return true;
    reader = layer.name;
    return false;
}

// A detection head's output is planned at its bound, which only its own output has: whatever
// consumes it would size its buffers by the detections in turn. Proposal's rois are the C heap's;
// the ROI layers read only their first, through the Splits `splits` gets.
Status check_value_dependent(const ncnn::Net& net, const ncnn::Layer& layer, const std::string& params, std::vector<int>& splits)
{
    LayerParams pd;
    Status s = pd.parse(params, layer.name);
    OutputBound bound;
    if (s.ok())
        s = OutputBound::for_layer(layer.type, pd, bound);
    if (!s.ok())
        return Status::error("layer " + layer.name + ": " + s.message());
    const bool rois = layer.type == "Proposal";
    for (int top : layer.tops)
    {
        std::string reader;
        if (!read_by_shape_alone(net, top, rois, reader, splits))
            return Status::error("layer " + reader + " reads " + net.blobs()[top].name + ", whose size depends on the "
                                 "detections of " + layer.name + " (" + layer.type + "): the runtime plans such outputs only "
                                 "where they leave the model" + (rois ? " or ROI layers read them" : ""));
    }
    return Status();
}

// `layer` as the layer it is built as (create_real_layer) makes it from `pd`: an error where it
// refuses them, or where it takes one blob and does not have one bottom and one top (what
// Net::load_param checks of the layers it makes); its flags otherwise
Status checked_flags(const ncnn::Layer& layer, const ncnn::ParamDict& pd, uint32_t& flags)
{
    std::unique_ptr<ncnn::Layer> real(create_real_layer(layer.typeindex, pd));
    if (!real)
        return Status::error("layer " + layer.name + ": NCNN has no CPU layer of type " + layer.type);
    if (real->load_param(pd) != 0)
        return Status::error("layer " + layer.name + ": its params are refused by " + layer.type + "::load_param");
    if (real->one_blob_only && (layer.bottoms.size() != 1 || layer.tops.size() != 1))
        return Status::error("layer " + layer.name + ": " + layer.type + " takes one input and one output");
    flags = layer_flags(*real);
    return Status();
}

} // namespace

ncnn::Layer* Model::ParamNet::create_overwrite_builtin_layer(const char* type)
{
    const int typeindex = ncnn::layer_to_index(type);
    // not built in: NCNN looks for a custom layer (which open refuses); an Input stays NCNN's (no
    // PlannedLayer replaces it)
    if (typeindex < 0 || typeindex == ncnn::LayerType::Input)
        return nullptr;
    ncnn::Layer* layer = new ncnn::Layer;
    layer->typeindex = typeindex;
    return layer;
}

Model::~Model()
{
    // the PlannedLayers' real layers release their Mats into allocators the owner still holds
    net_.clear();
}

Status Model::open(const std::string& param_path, const std::string& bin_path, const ncnn::Option& opt, ComputeHooks* hooks,
                   bool direct_io)
{
    fix_malloc_thresholds();
    net_.opt = opt;
    net_.opt.use_vulkan_compute = false;
    if (net_.load_param(param_path.c_str()) != 0)
        return Status::error("cannot load " + param_path);
    std::vector<std::string> params;
    Status s = read_layer_params(param_path, layer_count(), params);
    if (!s.ok())
        return s;

    std::vector<ncnn::Layer*>& layers = net_.mutable_layers();
    std::vector<int> rois_splits; // Splits passing rois on, which take them as they are
    for (int i = 0; i < layer_count(); i++)
    {
        ncnn::Layer* stock = layers[i];
        if (stock->typeindex == ncnn::LayerType::Input)
        {
            LayerParams pd;
            s = pd.parse(params[i], stock->name);
            if (!s.ok())
                return s;
            const int w = pd.get(0, 0), h = pd.get(1, 0), d = pd.get(11, 0), c = pd.get(2, 0);
            const int dims = c > 0 ? (d > 0 ? 4 : 3) : h > 0 ? 2 : w > 0 ? 1 : 0; // -233 (any value <= 0) leaves a size open
            for (int top : stock->tops)
                declared_inputs_[net_.blobs()[top].name] = {dims, c};
            continue;
        }
        if (stock->typeindex & ncnn::LayerType::CustomBit)
            return Status::error("layer " + stock->name + ": custom layer type " + stock->type + " is not supported");
        if (stock->featmask != 0)
            return Status::error("layer " + stock->name + ": per-layer feature masks (param 31) are not supported");
        if (OutputBound::value_dependent(stock->type))
        {
            s = check_value_dependent(net_, *stock, params[i], rois_splits);
            if (!s.ok())
                return s;
        }
        LayerParams pd;
        s = pd.parse(params[i], stock->name);
        uint32_t flags = 0;
        if (s.ok())
            s = checked_flags(*stock, pd, flags);
        if (!s.ok())
            return s;
        const bool as_given = std::find(rois_splits.begin(), rois_splits.end(), i) != rois_splits.end();
        layers[i] = new PlannedLayer(*stock, flags, std::move(params[i]), i, hooks, net_.blobs(), as_given);
        delete stock; // made by ParamNet, never loaded: nothing registered to destroy it
    }
    return weights_.open(bin_path, direct_io);
}

void Model::release_bounded_tops()
{
    for (int i = 0; i < layer_count(); i++)
        if (PlannedLayer* layer = planned(i))
            layer->release_bounded_top();
}

Status Model::check_input(const std::string& name, const ncnn::Mat& input) const
{
    const auto declared = declared_inputs_.find(name);
    if (declared == declared_inputs_.end() || declared->second.dims == 0)
        return Status();
    const DeclaredInput& want = declared->second;
    if (input.dims != want.dims)
        return Status::error("input '" + name + "' has " + std::to_string(input.dims) + " dimensions, the model declares "
                             + std::to_string(want.dims));
    if (want.dims >= 3 && input.c != want.c)
        return Status::error("input '" + name + "' has " + std::to_string(input.c) + " channels, the model declares "
                             + std::to_string(want.c));
    return Status();
}

PlannedLayer* Model::planned(int layer_index) const
{
    ncnn::Layer* layer = net_.layers()[layer_index];
    return layer->typeindex == ncnn::LayerType::Input ? nullptr : static_cast<PlannedLayer*>(layer);
}

} // namespace flexnn
