// conv_infer MODEL.param MODEL.bin IN.npy OUT.npy THREADS WINOGRAD(0|1) [RUNS]
// Inferences of a one-input model (blob "data" -> blob "output") through the patched NCNN with the
// workspace counted. Prints one JSON line: the first inference's workspace counts (the im2col
// matrix of ncnn_patches/0002's input slicing is a conv layer's largest workspace allocation) and,
// with RUNS > 0, the median wall time of RUNS further inferences (benchmarks only, never tests).
#include "runtime/build_info.h"
#include "runtime/counting_allocator.h"
#include "runtime/npy.h"

#include <net.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

flexnn::Status infer(ncnn::Net& net, const ncnn::Mat& in, ncnn::Mat& out)
{
    ncnn::Extractor ex = net.create_extractor();
    if (ex.input("data", in) != 0)
        return flexnn::Status::error("model has no input blob 'data'");
    if (ex.extract("output", out) != 0)
        return flexnn::Status::error("cannot extract blob 'output'");
    return flexnn::Status();
}

flexnn::Status run(char** argv, int runs, flexnn::AllocationCounts& first, double& median_ms)
{
    flexnn::CountingAllocator workspace; // outlives the net
    ncnn::Net net;
    net.opt.num_threads = atoi(argv[5]);
    net.opt.use_winograd_convolution = atoi(argv[6]) != 0;
    net.opt.workspace_allocator = &workspace;
    if (net.load_param(argv[1]) != 0 || net.load_model(argv[2]) != 0)
        return flexnn::Status::error(std::string("cannot load ") + argv[1]);

    ncnn::Mat in;
    ncnn::Mat out;
    flexnn::Status s = flexnn::read_npy(argv[3], in);
    if (s.ok())
        s = infer(net, in, out);
    if (s.ok())
        s = flexnn::write_npy(argv[4], out);
    first = workspace.counts();

    std::vector<double> ms;
    for (int i = 0; s.ok() && i < runs; i++)
    {
        auto t0 = std::chrono::steady_clock::now();
        s = infer(net, in, out);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    if (!ms.empty())
    {
        std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
        median_ms = ms[ms.size() / 2];
    }
    return s;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc != 7 && argc != 8)
    {
        fprintf(stderr, "usage: %s MODEL.param MODEL.bin IN.npy OUT.npy THREADS WINOGRAD(0|1) [RUNS]\n", argv[0]);
        return 2;
    }
    flexnn::AllocationCounts first;
    double median_ms = 0;
    flexnn::Status s = run(argv, argc == 8 ? atoi(argv[7]) : 0, first, median_ms);
    if (!s.ok())
    {
        fprintf(stderr, "error: %s\n", s.message().c_str());
        return 1;
    }
    printf("{\"isa\": \"%s\", \"workspace_peak_bytes\": %zu, \"workspace_largest_bytes\": %zu, \"median_ms\": %.4f}\n",
           flexnn::build_info().isa.c_str(), first.peak_bytes, first.largest_bytes, median_ms);
    return 0;
}
