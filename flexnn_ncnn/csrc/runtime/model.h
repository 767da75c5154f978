#ifndef FLEXNN_MODEL_H
#define FLEXNN_MODEL_H

#include "runtime/planned_layer.h"
#include "runtime/status.h"
#include "runtime/weight_reader.h"

#include <net.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace flexnn {

// A model's graph as NCNN parsed it, every layer but Input replaced by a PlannedLayer, and its
// .bin opened for positional reads. No weights are loaded: the runtime loads layers itself.
class Model
{
public:
    // opt: the options every layer is built and run with (threads, packing, fp16, ...); direct_io:
    // the .bin is opened for O_DIRECT (WeightFile::open)
    Status open(const std::string& param_path, const std::string& bin_path, const ncnn::Option& opt, ComputeHooks* hooks,
                bool direct_io);
    ~Model();

    ncnn::Net& net()
    {
        return net_;
    }
    int layer_count() const
    {
        return (int)net_.layers().size();
    }
    // null for Input layers, which hold no weights and never compute
    PlannedLayer* planned(int layer_index) const;
    const std::string& layer_name(int layer_index) const
    {
        return net_.layers()[layer_index]->name;
    }
    const WeightFile& weights() const
    {
        return weights_;
    }
    const ncnn::Option& options() const
    {
        return net_.opt;
    }
    // every value-dependent layer lets go of its top's slot (PlannedLayer::release_bounded_top)
    void release_bounded_tops();
    // `input` against what the model's Input layer declares for blob `name`: its rank, and its channels
    // (the width and height a model declares are those it was exported at; NCNN runs others)
    Status check_input(const std::string& name, const ncnn::Mat& input) const;

private:
    struct DeclaredInput
    {
        int dims; // 0: nothing declared
        int c;
    };

    // A Net whose load_param makes a bare ncnn::Layer for every built-in layer, not NCNN's CPU layer:
    // open replaces each by a PlannedLayer, which builds the real one on every load. (NCNN's would all
    // exist at once, up to 1.4 KB each, and leave the heap that much larger for the process's life.)
    class ParamNet : public ncnn::Net
    {
    protected:
        ncnn::Layer* create_overwrite_builtin_layer(const char* type) override;
    };

    ParamNet net_;
    std::map<std::string, DeclaredInput> declared_inputs_; // by blob name
    WeightFile weights_;
};

} // namespace flexnn

#endif // FLEXNN_MODEL_H
