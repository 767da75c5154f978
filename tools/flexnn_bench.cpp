// flexnn-bench: prepare, plan and run a model on the device, printing one JSON line.
//
//   flexnn-bench MODEL.param MODEL.bin INPUT.npy [key=value ...]
//     budget=BYTES|min  what the run may hold: arena + NCNN's over-read margin (+ the O_DIRECT window
//                       with direct_io=1), for mode=flexnn (required there); min: the smallest
//                       feasible budget for this model on this device
//     out=FILE.npy      write the (first) output there
//     mode=flexnn       prepare here, plan for the budget, run in the planned arena (default);
//                       ondemand: the same, but each layer's load waits for the previous layer's
//                       computation (no overlap; with budget=min, the On-Demand baseline);
//                       stock / direct: NCNN's own Net with default options / Winograd and sgemm off
//     direct_io=1       read the .bin with O_DIRECT (the planner leaves room for its aligned window)
//     map_weights=1     map the pre-transformed weights from their file instead of reading them into
//                       the arena (zero copy, over the arena bytes the plan gives them)
//     static_arena=0    no arena: each planned buffer a heap block from request to release (the
//                       ablation w.o.mem; with mode=ondemand, w.o.both)
//     transformed=FILE  where prepare writes the layers' pre-transformed weights, which every load
//                       then reads instead of transforming (default: MODEL.transformed beside the
//                       .param); transformed=0: layers transform their raw weights on every load
//     loops=8 warmup=4 threads=1 loader=any|little|middle|big|computing input=data output=output
//
// Output: {"mode", "budget", "latency_us": {"min", "median", "max"}, "arena_bytes", "outside_arena_bytes",
// "uncounted_rss_bytes", "vm_hwm_minus_idle_bytes", "load_wait_us_median", "arena_weight_bytes",
// "mapped_weight_bytes", "mapped_peak_bytes"}; uncounted_rss_bytes: what the process held beyond the
// runtime's count in a first inference, which the plan run leaves room for (0 for stock / direct);
// arena_weight_bytes / mapped_weight_bytes: the weight bytes the timed runs were served in the arena /
// made resident in the mapped file, summed; mapped_peak_bytes: the most bytes of records mapped at
// once. Errors: one "error: ..." line, exit 1.
#include "planner/planner.h"
#include "runtime/executor.h"
#include "runtime/heap_policy.h"
#include "runtime/npy.h"
#include "runtime/profiler.h"
#include "runtime/stock_run.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <string>
#include <vector>

namespace {

const uint64_t kArenaMargin = NCNN_MALLOC_OVERREAD;

uint64_t status_bytes(const char* field)
{
    std::ifstream status("/proc/self/status");
    std::string line;
    const std::string key = std::string(field) + ":";
    while (std::getline(status, line))
        if (line.compare(0, key.size(), key) == 0)
            return std::strtoull(line.c_str() + key.size(), nullptr, 10) * 1024;
    return 0;
}

// every refusal is one line and exit code 2, as in the Python CLIs (flexnn_ncnn/cli.py)
int fail(const std::string& message)
{
    fprintf(stderr, "error: %s\n", message.c_str());
    return 2;
}

double median(std::vector<double> v)
{
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double now_us()
{
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

} // namespace

int main(int argc, char** argv)
{
    flexnn::fix_malloc_thresholds(); // before anything measured allocates: runtime/heap_policy.h
    if (argc < 4)
        return fail("usage: flexnn-bench MODEL.param MODEL.bin INPUT.npy [budget=BYTES|min mode=flexnn|ondemand|stock|direct "
                    "loops=8 warmup=4 threads=1 loader=any|little|middle|big|computing direct_io=0|1 map_weights=0|1 static_arena=0|1 input=data "
                    "output=output out=FILE.npy]");
    std::map<std::string, std::string> args = {{"mode", "flexnn"}, {"loops", "8"}, {"warmup", "4"}, {"threads", "1"},
                                               {"loader", "any"}, {"transformed", ""}, {"input", "data"}, {"output", "output"}, {"budget", "0"},
                                               {"out", ""}, {"direct_io", "0"}, {"map_weights", "0"},
                                               {"static_arena", "1"}};
    for (int i = 4; i < argc; i++)
    {
        const std::string arg = argv[i];
        const size_t eq = arg.find('=');
        if (eq == std::string::npos || !args.count(arg.substr(0, eq)))
            return fail("unknown argument '" + arg + "'");
        args[arg.substr(0, eq)] = arg.substr(eq + 1);
    }
    const std::string param = argv[1], bin = argv[2], mode = args["mode"];
    const int loops = std::atoi(args["loops"].c_str()), warmup = std::atoi(args["warmup"].c_str());
    uint64_t budget = std::strtoull(args["budget"].c_str(), nullptr, 10);
    flexnn::RuntimeOptions options;
    options.num_threads = std::atoi(args["threads"].c_str());
    if (loops < 1 || warmup < 0 || options.num_threads < 1)
        return fail("loops and threads must be at least 1, warmup at least 0");
    if (!flexnn::loader_cores_from_name(args["loader"], options.loader_cores))
        return fail("loader must be any, little, middle, big or computing");
    if (args["direct_io"] != "0" && args["direct_io"] != "1")
        return fail("direct_io must be 0 or 1");
    options.direct_io = args["direct_io"] == "1";
    if (args["map_weights"] != "0" && args["map_weights"] != "1")
        return fail("map_weights must be 0 or 1");
    options.map_weights = args["map_weights"] == "1";
    flexnn::PlannerOptions planner;
    planner.map_transformed = options.map_weights;
    if (args["static_arena"] != "0" && args["static_arena"] != "1")
        return fail("static_arena must be 0 or 1");
    options.static_arena = args["static_arena"] == "1";

    const uint64_t idle_rss = status_bytes("VmRSS");
    ncnn::Mat input;
    flexnn::Status s = flexnn::read_npy(argv[3], input);
    if (!s.ok())
        return fail(s.message());
    const flexnn::NamedMats inputs = {{args["input"], input}};
    const std::vector<std::string> outputs = {args["output"]};

    std::vector<double> latencies, waits;
    uint64_t arena = 0, outside = 0, uncounted_rss = 0;
    uint64_t arena_weights = 0, mapped_weights = 0, mapped_peak = 0; // the timed runs'
    flexnn::NamedMats last_outputs;
    if (mode == "stock" || mode == "direct")
    {
        flexnn::StockRunOptions stock;
        stock.num_threads = options.num_threads;
        stock.use_winograd = stock.use_sgemm = mode == "stock";
        for (int i = 0; i < warmup + loops; i++)
        {
            flexnn::StockRunResult result;
            const double t0 = now_us();
            s = flexnn::run_stock(param, bin, inputs, outputs, stock, result);
            if (!s.ok())
                return fail(s.message());
            last_outputs = result.outputs;
            if (i >= warmup)
                latencies.push_back(now_us() - t0);
        }
    }
    else if (mode == "flexnn" || mode == "ondemand")
    {
        options.overlap_loading = mode == "flexnn";
        if (budget <= kArenaMargin && args["budget"] != "min")
            return fail("mode " + mode + " needs budget=BYTES (more than " + std::to_string(kArenaMargin) + ") or budget=min");
        std::string transformed = args["transformed"];
        if (transformed.empty())
            transformed = (param.size() > 6 && param.compare(param.size() - 6, 6, ".param") == 0 ? param.substr(0, param.size() - 6) : param)
                          + ".transformed";
        else if (transformed == "0")
            transformed.clear();
        flexnn::PrepareResult prepared;
        s = flexnn::prepare(param, bin, transformed, inputs, outputs, options, prepared);
        if (!s.ok())
            return fail(s.message());
        // prepare held every weight at once: measure the peak of the runs only
#if defined(__GLIBC__)
        malloc_trim(0);
#endif
        std::ofstream("/proc/self/clear_refs") << "5";
        std::unique_ptr<flexnn::Executor> executor;
        options.outside_allowance = prepared.outside_bytes;
        s = flexnn::Executor::create(param, bin, transformed, options, prepared.schedule, prepared.profile, executor);
        if (!s.ok())
            return fail(s.message());
        // the budget holds the arena, its margin, what the executor keeps outside the arena, and what
        // prepare saw requested outside any plan (OpenMP workers inside a layer)
        const uint64_t beside_arena = kArenaMargin + executor->reserved_outside_bytes() + prepared.outside_bytes;
        const uint64_t smallest = flexnn::min_feasible_budget(prepared.profile, planner); // the arena's
        if (!smallest)
            return fail("the planner found no feasible budget for this model");
        if (args["budget"] == "min")
            budget = smallest + beside_arena;
        if (budget <= beside_arena)
            return fail("budget " + std::to_string(budget) + " B leaves no room for an arena beside " + std::to_string(beside_arena)
                        + " B (margin, O_DIRECT window, allocations outside any plan)");
        s = executor->set_budget(budget - beside_arena, planner);
        if (!s.ok())
            return fail(s.message());
        // what this process holds beyond the runtime's count (code, NCNN's Net, thread stacks, what
        // prepare left), measured by one inference at that plan as prepare measures it for a sidecar
        // (flexnn_ncnn/overhead.py); the plan then run leaves room for it too
        flexnn::RunStats first;
        s = executor->run(inputs, last_outputs, first);
        if (!s.ok())
            return fail(s.message());
        const uint64_t counted = executor->arena_bytes() + first.outside_peak_bytes;
        const uint64_t peak = status_bytes("VmHWM") - idle_rss;
        uncounted_rss = peak > counted ? peak - counted : 0;
        if (args["budget"] == "min")
            budget += uncounted_rss;
        if (budget < smallest + beside_arena + uncounted_rss)
            return fail("budget " + std::to_string(budget) + " B is infeasible beside " + std::to_string(beside_arena + uncounted_rss)
                        + " B outside the arena (" + std::to_string(uncounted_rss) + " B of it resident but not counted by the "
                        "runtime); the smallest feasible budget is " + std::to_string(smallest + beside_arena + uncounted_rss) + " B");
        s = executor->set_budget(budget - beside_arena - uncounted_rss, planner);
        if (!s.ok())
            return fail(s.message());
        std::ofstream("/proc/self/clear_refs") << "5"; // the peak of the runs at the plan they run
        for (int i = 0; i < warmup + loops; i++)
        {
            flexnn::RunStats stats;
            s = executor->run(inputs, last_outputs, stats);
            if (!s.ok())
                return fail(s.message());
            if (i >= warmup)
            {
                latencies.push_back(stats.latency_us);
                waits.push_back(stats.load_wait_us);
                arena_weights += stats.arena_weight_bytes;
                mapped_weights += stats.mapped_weight_bytes;
                mapped_peak = std::max(mapped_peak, stats.mapped_peak_bytes);
            }
            outside = std::max(outside, stats.outside_peak_bytes);
        }
        arena = executor->arena_bytes();
    }
    else
        return fail("mode must be flexnn, ondemand, stock or direct, not '" + mode + "'");

    const uint64_t hwm = status_bytes("VmHWM");
    if (!args["out"].empty())
    {
        s = flexnn::write_npy(args["out"], last_outputs.front().second);
        if (!s.ok())
            return fail(s.message());
    }
    printf("{\"mode\": \"%s\", \"budget\": %llu, \"latency_us\": {\"min\": %.1f, \"median\": %.1f, \"max\": %.1f}, \"arena_bytes\": %llu, "
           "\"outside_arena_bytes\": %llu, \"uncounted_rss_bytes\": %llu, \"vm_hwm_minus_idle_bytes\": %lld, "
           "\"load_wait_us_median\": %.1f, \"arena_weight_bytes\": %llu, \"mapped_weight_bytes\": %llu, \"mapped_peak_bytes\": %llu}\n",
           mode.c_str(), (unsigned long long)budget, *std::min_element(latencies.begin(), latencies.end()), median(latencies),
           *std::max_element(latencies.begin(), latencies.end()), (unsigned long long)arena, (unsigned long long)outside,
           (unsigned long long)uncounted_rss,
           (long long)hwm - (long long)idle_rss, median(waits), (unsigned long long)arena_weights,
           (unsigned long long)mapped_weights, (unsigned long long)mapped_peak);
    return 0;
}
