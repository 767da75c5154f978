#ifndef FLEXNN_STOCK_RUN_H
#define FLEXNN_STOCK_RUN_H

#include "runtime/counting_allocator.h"
#include "runtime/status.h"

#include <mat.h>

#include <string>
#include <utility>
#include <vector>

namespace flexnn {

using NamedMats = std::vector<std::pair<std::string, ncnn::Mat> >;

struct StockRunOptions
{
    int num_threads = 1;
    // NCNN-Direct turns both off; NCNN-Default keeps NCNN's defaults (on)
    bool use_winograd = true;
    bool use_sgemm = true;
    bool use_packing_layout = true;
    // route weights and their transformed copies (load_model, create_pipeline) through a counting
    // allocator (ncnn_patches/0001), to see how much of the model's memory the hook reaches
    bool count_weights = false;
    // route the Net's workspace (im2col matrices, padded inputs, layout conversions) through a
    // counting allocator, to measure a layer's scratch memory (ncnn_patches/0002's input slicing)
    bool count_workspace = false;
};

struct StockRunResult
{
    NamedMats outputs;
    AllocationCounts weights;         // what the hook routed while loading (all zero unless count_weights)
    size_t weights_live_after_clear = 0; // routed bytes still live once the net is cleared: must be 0
    AllocationCounts workspace;       // the inference's workspace (all zero unless count_workspace)
};

// One inference with NCNN's own Net: load, forward inputs, extract outputs, clear.
// The reference path (NCNN-Default / NCNN-Direct) that everything else is compared with.
Status run_stock(const std::string& param_path, const std::string& bin_path, const NamedMats& inputs,
                 const std::vector<std::string>& output_names, const StockRunOptions& options, StockRunResult& result);

} // namespace flexnn

#endif // FLEXNN_STOCK_RUN_H
