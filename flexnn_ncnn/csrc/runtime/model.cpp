#include "runtime/model.h"

#include "runtime/heap_policy.h"

#include <datareader.h>
#include <layer_type.h>

#include <fstream>
#include <sstream>

namespace flexnn {

namespace {

// Each layer's param text, read again from the .param the Net already accepted (the Net keeps only
// the layers built from them; a PlannedLayer parses its text again on every load) and checked by
// parsing it once here.
Status read_layer_params(const std::string& path, int layer_count, std::vector<std::string>& params)
{
    std::ifstream file(path, std::ios::binary);
    std::stringstream contents;
    contents << file.rdbuf();
    if (!file)
        return Status::error("cannot read " + path);
    const std::string text = contents.str();
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

} // namespace

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
    for (int i = 0; i < layer_count(); i++)
    {
        ncnn::Layer* stock = layers[i];
        if (stock->typeindex == ncnn::LayerType::Input)
            continue;
        if (stock->typeindex & ncnn::LayerType::CustomBit)
            return Status::error("layer " + stock->name + ": custom layer type " + stock->type + " is not supported");
        if (stock->featmask != 0)
            return Status::error("layer " + stock->name + ": per-layer feature masks (param 31) are not supported");
        layers[i] = new PlannedLayer(*stock, std::move(params[i]), i, hooks);
        delete stock; // built by create_layer_cpu, never loaded: nothing registered to destroy it
    }
    return weights_.open(bin_path, direct_io);
}

PlannedLayer* Model::planned(int layer_index) const
{
    ncnn::Layer* layer = net_.layers()[layer_index];
    return layer->typeindex == ncnn::LayerType::Input ? nullptr : static_cast<PlannedLayer*>(layer);
}

} // namespace flexnn
