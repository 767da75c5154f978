// fault_injection: every error path of prepare and of the pipelined executor, the NCNN way. First,
// for every k in 1..P (the requests prepare's recording allocators serve), a prepare whose k-th
// request fails and one whose k-th request throws: each must fail, leave no transformed file, and a
// clean prepare after them must record the same profile. Then it prepares MODEL, plans it
// at BUDGET (bytes of arena, or "min") and runs it once for the reference output and the number N of
// requests its arena allocators serve. Then, for every k in 1..N, a run whose k-th request fails
// (nullptr) and one whose k-th request throws std::bad_alloc (where layers are built on the loading
// thread, where they compute, and where inputs are copied in); a plan change whose arena cannot be
// allocated; and DELAYED_RUNS runs with random delays on both threads. Each faulty run must end in an
// error, and the run after it must equal the reference bit for bit. Prints one JSON line; errors:
// one "error: ..." line, exit 1. The sanitizer builds add: nothing leaked, no race, no hang (the
// caller's timeout).
//
//   fault_injection MODEL.param MODEL.bin INPUT.npy INPUT_BLOB OUTPUT_BLOB THREADS BUDGET DELAYED_RUNS
//                   [transformed=FILE] [map_weights=1] [loader=computing|...] [out=FILE.npy (the reference output)]
#include "program_util.h"
#include "planner/planner.h"
#include "runtime/executor.h"
#include "runtime/npy.h"
#include "runtime/profiler.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using flexnn_test::fail;
using flexnn_test::same;

int main(int argc, char** argv)
{
    if (argc < 9)
        return fail("usage: fault_injection MODEL.param MODEL.bin INPUT.npy INPUT_BLOB OUTPUT_BLOB THREADS BUDGET DELAYED_RUNS "
                    "[transformed=FILE] [out=FILE.npy] [map_weights=1]");
    const std::string param = argv[1], bin = argv[2], budget_arg = argv[7];
    const int threads = std::atoi(argv[6]), delayed_runs = std::atoi(argv[8]);
    if (threads < 1 || delayed_runs < 0)
        return fail("THREADS must be at least 1, DELAYED_RUNS at least 0");
    std::string transformed, out;
    bool map_weights = false;
    flexnn::LoaderCores loader = flexnn::LoaderCores::Any;
    for (int i = 9; i < argc; i++)
    {
        if (std::strncmp(argv[i], "transformed=", 12) == 0)
            transformed = argv[i] + 12;
        else if (std::strncmp(argv[i], "loader=", 7) == 0)
        {
            if (!flexnn::loader_cores_from_name(argv[i] + 7, loader))
                return fail(std::string("unknown ") + argv[i]);
        }
        else if (std::strcmp(argv[i], "map_weights=1") == 0)
            map_weights = true;
        else if (std::strncmp(argv[i], "out=", 4) == 0)
            out = argv[i] + 4;
        else
            return fail(std::string("unknown argument '") + argv[i] + "'");
    }

    ncnn::Mat input;
    flexnn::Status s = flexnn::read_npy(argv[3], input);
    if (!s.ok())
        return fail(s.message());
    const flexnn::NamedMats inputs = {{argv[4], input}};
    flexnn::RuntimeOptions options;
    options.num_threads = threads;
    options.loader_cores = loader;
    options.canaries = true;
    flexnn::PrepareResult prepared;
    flexnn::FaultInjector prepare_faults;
    s = flexnn::prepare(param, bin, transformed, inputs, {argv[5]}, options, prepared, &prepare_faults);
    if (!s.ok())
        return fail(s.message());
    const int prepare_requests = prepare_faults.requests();
    int prepare_failed = 0;
    for (int k = 1; k <= prepare_requests; k++)
        for (const bool throws : {false, true})
        {
            flexnn::FaultPlan faults;
            (throws ? faults.throw_request : faults.fail_request) = k;
            prepare_faults.arm(faults);
            flexnn::PrepareResult failed;
            const std::string what = std::string(throws ? "throwing" : "failing") + " prepare's request " + std::to_string(k) + " of "
                                     + std::to_string(prepare_requests);
            if (flexnn::prepare(param, bin, transformed, inputs, {argv[5]}, options, failed, &prepare_faults).ok())
                return fail(what + " did not fail it");
            prepare_failed++;
        }
    flexnn::PrepareResult again;
    s = flexnn::prepare(param, bin, transformed, inputs, {argv[5]}, options, again);
    if (!s.ok())
        return fail("the prepare after the failed ones: " + s.message());
    if (again.profile.tensors.size() != prepared.profile.tensors.size())
        return fail("the prepare after the failed ones recorded another profile");
    for (size_t k = 0; k < again.profile.tensors.size(); k++)
        if (again.profile.tensors[k].size != prepared.profile.tensors[k].size
            || again.profile.tensors[k].last_use != prepared.profile.tensors[k].last_use)
            return fail("the prepare after the failed ones recorded another profile");
    flexnn::PlannerOptions planner;
    planner.map_transformed = options.map_weights = map_weights;
    const uint64_t smallest = flexnn::min_feasible_budget(prepared.profile, planner);
    const uint64_t budget = budget_arg == "min" ? smallest : std::strtoull(budget_arg.c_str(), nullptr, 10);

    std::unique_ptr<flexnn::Executor> executor;
    options.outside_allowance = prepared.outside_bytes;
    s = flexnn::Executor::create(param, bin, transformed, options, prepared.schedule, prepared.profile, executor);
    if (!s.ok())
        return fail(s.message());
    s = executor->set_budget(budget, planner);
    if (!s.ok())
        return fail(s.message());

    auto run = [&](flexnn::NamedMats& outputs) {
        flexnn::RunStats stats;
        return executor->run(inputs, outputs, stats);
    };
    flexnn::NamedMats reference;
    s = run(reference);
    if (!s.ok())
        return fail("the reference run: " + s.message());
    // the second run is the steady state: resident layers were built by the first
    s = run(reference);
    if (!s.ok())
        return fail("the reference run: " + s.message());
    const int requests = executor->last_run_requests();
    auto recovered = [&](const std::string& after) -> std::string {
        executor->inject_faults(flexnn::FaultPlan());
        flexnn::NamedMats outputs;
        flexnn::Status again = run(outputs);
        if (!again.ok())
            return "the run after " + after + " failed: " + again.message();
        if (!same(outputs.front().second, reference.front().second))
            return "the run after " + after + " differs from the reference";
        return "";
    };

    int failed = 0, thrown = 0;
    for (int k = 1; k <= requests; k++)
        for (const bool throws : {false, true})
        {
            flexnn::FaultPlan faults;
            (throws ? faults.throw_request : faults.fail_request) = k;
            executor->inject_faults(faults);
            flexnn::NamedMats outputs;
            const std::string what = std::string(throws ? "throwing" : "failing") + " request " + std::to_string(k) + " of "
                                     + std::to_string(requests);
            if (run(outputs).ok())
                return fail(what + " did not fail the run");
            (throws ? thrown : failed)++;
            const std::string problem = recovered(what);
            if (!problem.empty())
                return fail(problem);
        }

    flexnn::FaultPlan no_arena;
    no_arena.fail_arena = true;
    executor->inject_faults(no_arena);
    if (executor->set_budget(budget + budget / 2 + 4096, planner).ok())
        return fail("a plan change whose arena cannot be allocated succeeded");
    std::string problem = recovered("a failed plan change");
    if (!problem.empty())
        return fail(problem);

    for (int i = 0; i < delayed_runs; i++)
    {
        flexnn::FaultPlan delays;
        delays.max_delay_us = 300;
        delays.seed = (uint32_t)i;
        executor->inject_faults(delays);
        flexnn::NamedMats outputs;
        s = run(outputs);
        if (!s.ok())
            return fail("delayed run " + std::to_string(i) + ": " + s.message());
        if (!same(outputs.front().second, reference.front().second))
            return fail("delayed run " + std::to_string(i) + " differs from the reference");
    }
    if (!out.empty())
    {
        s = flexnn::write_npy(out, reference.front().second);
        if (!s.ok())
            return fail(s.message());
    }
    printf("{\"prepare_requests\": %d, \"prepare_failed\": %d, \"requests\": %d, \"failed\": %d, \"thrown\": %d, "
           "\"delayed_runs\": %d, \"smallest_budget\": %llu}\n",
           prepare_requests, prepare_failed, requests, failed, thrown, delayed_runs, (unsigned long long)smallest);
    return 0;
}
