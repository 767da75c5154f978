#include "runtime/stock_run.h"

#include "runtime/thread_allocator_scope.h"

#include <net.h>

#include <cstdio>

namespace flexnn {

namespace {

// checked before NCNN opens it, so a missing file is one error line, not NCNN's log as well
bool readable(const std::string& path)
{
    FILE* f = fopen(path.c_str(), "rb");
    if (f)
        fclose(f);
    return f != nullptr;
}

} // namespace

Status run_stock(const std::string& param_path, const std::string& bin_path, const NamedMats& inputs,
                 const std::vector<std::string>& output_names, const StockRunOptions& options, StockRunResult& result)
{
    for (const std::string* path : {&param_path, &bin_path})
        if (!readable(*path))
            return Status::error("cannot open " + *path);

    CountingAllocator weights; // outlives the net: its Mats are freed into it
    CountingAllocator workspace;
    {
        ncnn::Net net;
        net.opt.num_threads = options.num_threads;
        net.opt.use_winograd_convolution = options.use_winograd;
        net.opt.use_sgemm_convolution = options.use_sgemm;
        net.opt.use_packing_layout = options.use_packing_layout;
        if (options.count_workspace)
            net.opt.workspace_allocator = &workspace;

        if (net.load_param(param_path.c_str()) != 0)
            return Status::error("cannot load " + param_path);
        {
            ThreadAllocatorScope scope(options.count_weights ? &weights : nullptr);
            if (net.load_model(bin_path.c_str()) != 0)
                return Status::error("cannot load weights " + bin_path + " for " + param_path);
        }
        result.weights = weights.counts();

        ncnn::Extractor ex = net.create_extractor();
        for (const auto& input : inputs)
            if (ex.input(input.first.c_str(), input.second) != 0)
                return Status::error("model has no input blob '" + input.first + "'");
        result.outputs.clear();
        for (const std::string& name : output_names)
        {
            ncnn::Mat out;
            if (ex.extract(name.c_str(), out) != 0)
                return Status::error("cannot extract blob '" + name + "'");
            result.outputs.emplace_back(name, out.clone());
        }
    }
    result.weights_live_after_clear = weights.counts().current_bytes;
    result.workspace = workspace.counts();
    return Status();
}

} // namespace flexnn
