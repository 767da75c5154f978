#include "runtime/model.h"

#include <datareader.h>
#include <layer_type.h>
#include <paramdict.h>

#include <cstdio>

namespace flexnn {

namespace {

// ParamDict's parser is NCNN's, reachable from a subclass only.
class ParamDictReader : public ncnn::ParamDict
{
public:
    int read(const ncnn::DataReader& dr)
    {
        return load_param(dr);
    }
};

struct FileCloser
{
    void operator()(FILE* f) const
    {
        fclose(f);
    }
};

// Each layer's ParamDict, read again from the text .param the Net already accepted (the Net keeps
// only the layers built from them; a PlannedLayer rebuilds its layer from the dict on every load).
Status read_param_dicts(const std::string& path, int layer_count, std::vector<ParamDictReader>& dicts)
{
    std::unique_ptr<FILE, FileCloser> fp(fopen(path.c_str(), "rb"));
    if (!fp)
        return Status::error("cannot open " + path);
    ncnn::DataReaderFromStdio dr(fp.get());
    int magic = 0, layers = 0, blobs = 0;
    if (dr.scan("%d", &magic) != 1 || dr.scan("%d", &layers) != 1 || dr.scan("%d", &blobs) != 1 || layers != layer_count)
        return Status::error(path + ": cannot read the layer count again");
    dicts.resize(layer_count);
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
        if (dicts[i].read(dr) != 0)
            return Status::error(path + ": cannot read the params of layer " + std::to_string(i) + " again");
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
    net_.opt = opt;
    net_.opt.use_vulkan_compute = false;
    if (net_.load_param(param_path.c_str()) != 0)
        return Status::error("cannot load " + param_path);
    std::vector<ParamDictReader> dicts;
    Status s = read_param_dicts(param_path, layer_count(), dicts);
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
        layers[i] = new PlannedLayer(*stock, dicts[i], i, hooks);
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
