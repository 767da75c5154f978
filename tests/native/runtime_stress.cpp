// runtime_stress: the pipelined executor many times over, for the sanitizer builds (ThreadSanitizer,
// AddressSanitizer) and as a hang check. Prepares MODEL once, then cycles the plan through the
// budgets (bytes of arena, or "min" for the smallest feasible one) every `switch_every` inferences;
// each output must equal the first inference's bit for bit. Prints one JSON line; errors: one
// "error: ..." line, exit 1.
//
//   runtime_stress MODEL.param MODEL.bin INPUT.npy INPUT_BLOB OUTPUT_BLOB THREADS INFERENCES SWITCH_EVERY BUDGET...
//                  [direct_io=1] [loader=middle] [static_arena=0] [transformed=FILE (pre-transformed weights written there)]
#include "planner/planner.h"
#include "runtime/executor.h"
#include "runtime/npy.h"
#include "runtime/profiler.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int fail(const std::string& message)
{
    fprintf(stderr, "error: %s\n", message.c_str());
    return 1;
}

bool same(const ncnn::Mat& a, const ncnn::Mat& b)
{
    if (a.w != b.w || a.h != b.h || a.d != b.d || a.c != b.c || a.elemsize != b.elemsize)
        return false;
    for (int q = 0; q < a.c; q++)
        if (memcmp(a.channel(q), b.channel(q), (size_t)a.w * a.h * a.d * a.elemsize) != 0)
            return false;
    return true;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 10)
        return fail("usage: runtime_stress MODEL.param MODEL.bin INPUT.npy INPUT_BLOB OUTPUT_BLOB THREADS INFERENCES SWITCH_EVERY BUDGET...");
    const std::string param = argv[1], bin = argv[2];
    const int threads = std::atoi(argv[6]), inferences = std::atoi(argv[7]), switch_every = std::atoi(argv[8]);
    if (threads < 1 || inferences < 1 || switch_every < 1)
        return fail("THREADS, INFERENCES and SWITCH_EVERY must be at least 1");

    ncnn::Mat input;
    flexnn::Status s = flexnn::read_npy(argv[3], input);
    if (!s.ok())
        return fail(s.message());
    const flexnn::NamedMats inputs = {{argv[4], input}};
    flexnn::RuntimeOptions options;
    options.num_threads = threads;
    std::string transformed;
    std::vector<std::string> budget_args;
    for (int i = 9; i < argc; i++)
    {
        if (std::strcmp(argv[i], "direct_io=1") == 0)
            options.direct_io = true;
        else if (std::strcmp(argv[i], "loader=middle") == 0)
            options.loader_cores = flexnn::LoaderCores::Middle;
        else if (std::strcmp(argv[i], "static_arena=0") == 0)
            options.static_arena = false;
        else if (std::strncmp(argv[i], "transformed=", 12) == 0)
            transformed = argv[i] + 12;
        else
            budget_args.push_back(argv[i]);
    }
    flexnn::PrepareResult prepared;
    s = flexnn::prepare(param, bin, transformed, inputs, {argv[5]}, options, prepared);
    if (!s.ok())
        return fail(s.message());
    const flexnn::PlannerOptions planner;
    std::vector<uint64_t> budgets;
    for (const std::string& b : budget_args)
        budgets.push_back(b == "min" ? flexnn::min_feasible_budget(prepared.profile, planner) : std::strtoull(b.c_str(), nullptr, 10));
    if (budgets.empty())
        return fail("no BUDGET given");

    std::unique_ptr<flexnn::Executor> executor;
    options.outside_allowance = prepared.outside_bytes; // every run stays within what prepare measured
    s = flexnn::Executor::create(param, bin, transformed, options, prepared.schedule, prepared.profile, executor);
    if (!s.ok())
        return fail(s.message());
    ncnn::Mat first;
    double load_wait_us = 0;
    for (int i = 0; i < inferences; i++)
    {
        if (i % switch_every == 0)
        {
            s = executor->set_budget(budgets[i / switch_every % budgets.size()], planner);
            if (!s.ok())
                return fail(s.message());
        }
        flexnn::NamedMats outputs;
        flexnn::RunStats stats;
        s = executor->run(inputs, outputs, stats);
        if (!s.ok())
            return fail("inference " + std::to_string(i) + ": " + s.message());
        if (i == 0)
            first = outputs.front().second;
        else if (!same(outputs.front().second, first))
            return fail("inference " + std::to_string(i) + " differs from the first");
        load_wait_us += stats.load_wait_us;
    }
    printf("{\"inferences\": %d, \"budgets\": %zu, \"load_wait_us_total\": %.1f}\n", inferences, budgets.size(), load_wait_us);
    return 0;
}
