#ifndef FLEXNN_MAPPED_NET_H
#define FLEXNN_MAPPED_NET_H

#include "runtime/runtime_options.h"
#include "runtime/status.h"
#include "runtime/stock_run.h"

#include <net.h>

#include <memory>
#include <string>
#include <vector>

namespace flexnn {

// The user's alternative to FlexNN, as a baseline (issue 15): NCNN's own Net with its .bin
// memory-mapped, the llama.cpp way. Net::load_model(const unsigned char*) lets raw fp32 weights
// point into the mapping (zero copy); what create_pipeline derives (Winograd, packed layouts) is
// allocated as usual, and lightmode drops the raw weights it no longer needs. No budget, no streaming.
class MappedNet
{
public:
    ~MappedNet();
    static Status open(const std::string& param_path, const std::string& bin_path, const RuntimeOptions& options,
                       std::unique_ptr<MappedNet>& out);
    MappedNet(const MappedNet&) = delete;
    MappedNet& operator=(const MappedNet&) = delete;

    // one inference: a fresh extractor, inputs in, outputs cloned out
    Status run(const NamedMats& inputs, const std::vector<std::string>& output_names, NamedMats& outputs);

private:
    MappedNet() = default;

    void* mapping_ = nullptr;
    size_t mapped_bytes_ = 0;
    ncnn::Net net_; // destroyed before the mapping its raw weights may point into
};

} // namespace flexnn

#endif // FLEXNN_MAPPED_NET_H
