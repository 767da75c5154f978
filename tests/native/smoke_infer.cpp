// smoke_infer MODEL.param MODEL.bin IN_BLOB IN.npy OUT_BLOB OUT.npy [threads] [count-weights]
// One inference through the patched NCNN; prints one JSON line of what the weight hook routed.
#include "runtime/build_info.h"
#include "runtime/npy.h"
#include "runtime/stock_run.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv)
{
    if (argc < 7)
    {
        fprintf(stderr, "usage: %s MODEL.param MODEL.bin IN_BLOB IN.npy OUT_BLOB OUT.npy [threads] [count-weights]\n", argv[0]);
        return 2;
    }
    flexnn::StockRunOptions options;
    options.num_threads = argc > 7 ? atoi(argv[7]) : 1;
    options.count_weights = argc > 8 && strcmp(argv[8], "count-weights") == 0;

    flexnn::NamedMats inputs(1);
    inputs[0].first = argv[3];
    flexnn::Status s = flexnn::read_npy(argv[4], inputs[0].second);
    flexnn::StockRunResult result;
    if (s.ok())
        s = flexnn::run_stock(argv[1], argv[2], inputs, {argv[5]}, options, result);
    if (s.ok())
        s = flexnn::write_npy(argv[6], result.outputs[0].second);
    if (!s.ok())
    {
        fprintf(stderr, "error: %s\n", s.message().c_str());
        return 1;
    }
    flexnn::BuildInfo info = flexnn::build_info();
    printf("{\"isa\": \"%s\", \"patch_series_id\": \"%s\", \"weights_total_bytes\": %zu, \"weights_allocations\": %zu, \"weights_live_after_clear\": %zu}\n",
           info.isa.c_str(), info.patch_series_id.c_str(), result.weights.total_bytes, result.weights.allocations,
           result.weights_live_after_clear);
    return 0;
}
