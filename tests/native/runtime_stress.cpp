// runtime_stress: the pipelined executor many times over, for the sanitizer builds (ThreadSanitizer,
// AddressSanitizer) and as a hang check. Prepares MODEL once, then cycles the plan through the
// budgets (bytes of arena, "min" for the smallest feasible one, "min*K" for K times it) every
// `switch_every` inferences; each output must equal the first inference's bit for bit. Prints one
// JSON line; errors: one "error: ..." line, exit 1.
//
//   runtime_stress MODEL.param MODEL.bin INPUT.npy INPUT_BLOB OUTPUT_BLOB THREADS INFERENCES SWITCH_EVERY BUDGET...
//                  [direct_io=1] [loader=middle|computing|...] [static_arena=0] [transformed=FILE (pre-transformed weights written there)]
//                  [map_weights=1 (the transformed weights mapped over their planned arena bytes)]
//                  [canaries=1] [observe=1 (a second thread reads the plan and the arena's size throughout, as
//                  Session.stats() does)] [out=FILE.npy (the first output, for a comparison with stock NCNN)]
#include "program_util.h"
#include "planner/planner.h"
#include "runtime/executor.h"
#include "runtime/npy.h"
#include "runtime/profiler.h"

#include <atomic>
#include <cctype>
#include <chrono>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using flexnn_test::fail;
using flexnn_test::same;

// Reads what Session.stats() and a budget switch's caller read, from its own thread, until stopped;
// every plan it sees must be whole: one placement per tensor, each inside the plan's arena.
class Observer
{
public:
    Observer(const flexnn::Executor& executor, size_t tensors)
        : thread_([this, &executor, tensors] {
              while (!stop_.load(std::memory_order_acquire))
              {
                  const flexnn::Plan plan = executor.plan();
                  executor.arena_bytes();
                  executor.reserved_outside_bytes();
                  bool whole = plan.tensors.size() == tensors && plan.arena_bytes <= plan.budget;
                  for (const flexnn::Placement& p : plan.tensors)
                      whole = whole && p.offset <= plan.arena_bytes;
                  torn_ += whole ? 0 : 1;
                  observations_++;
                  // as often as a monitoring thread would, leaving the cores to the runs
                  std::this_thread::sleep_for(std::chrono::microseconds(100));
              }
          })
    {
    }
    ~Observer()
    {
        stop();
    }
    // joins the thread (then the counts below are final)
    void stop()
    {
        stop_.store(true, std::memory_order_release);
        if (thread_.joinable())
            thread_.join();
    }
    long observations() const
    {
        return observations_;
    }
    long torn() const
    {
        return torn_;
    }

private:
    std::atomic<bool> stop_{false};
    long observations_ = 0; // observer thread until joined
    long torn_ = 0;         // plans seen that were not whole
    std::thread thread_;
};

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
    std::string transformed, out;
    bool observe = false;
    std::vector<std::string> budget_args;
    for (int i = 9; i < argc; i++)
    {
        if (std::strcmp(argv[i], "direct_io=1") == 0)
            options.direct_io = true;
        else if (std::strncmp(argv[i], "loader=", 7) == 0)
        {
            if (!flexnn::loader_cores_from_name(argv[i] + 7, options.loader_cores))
                return fail(std::string("unknown ") + argv[i]);
        }
        else if (std::strcmp(argv[i], "static_arena=0") == 0)
            options.static_arena = false;
        else if (std::strncmp(argv[i], "transformed=", 12) == 0)
            transformed = argv[i] + 12;
        else if (std::strcmp(argv[i], "canaries=1") == 0)
            options.canaries = true;
        else if (std::strcmp(argv[i], "map_weights=1") == 0)
            options.map_weights = true;
        else if (std::strcmp(argv[i], "observe=1") == 0)
            observe = true;
        else if (std::strncmp(argv[i], "out=", 4) == 0)
            out = argv[i] + 4;
        else
            budget_args.push_back(argv[i]);
    }
    flexnn::PrepareResult prepared;
    s = flexnn::prepare(param, bin, transformed, inputs, {argv[5]}, options, prepared);
    if (!s.ok())
        return fail(s.message());
    flexnn::PlannerOptions planner;
    planner.map_transformed = options.map_weights;
    std::vector<uint64_t> budgets;
    const uint64_t smallest = flexnn::min_feasible_budget(prepared.profile, planner);
    for (const std::string& b : budget_args)
    {
        char* end = nullptr;
        const unsigned long long bytes = std::strtoull(b.c_str(), &end, 10);
        if (!b.empty() && std::isdigit((unsigned char)b[0]) && *end == '\0')
            budgets.push_back(bytes);
        else if (b == "min")
            budgets.push_back(smallest);
        else if (b.compare(0, 4, "min*") == 0 && std::atoi(b.c_str() + 4) >= 1)
            budgets.push_back(smallest * std::atoi(b.c_str() + 4));
        else
            return fail("BUDGET " + b + " is not bytes, min or min*K");
    }
    if (budgets.empty())
        return fail("no BUDGET given");

    std::unique_ptr<flexnn::Executor> executor;
    options.outside_allowance = prepared.outside_bytes; // every run stays within what prepare measured
    s = flexnn::Executor::create(param, bin, transformed, options, prepared.schedule, prepared.profile, executor);
    if (!s.ok())
        return fail(s.message());
    ncnn::Mat first;
    double load_wait_us = 0;
    uint64_t mapped_weight_bytes = 0;
    std::unique_ptr<Observer> observer; // from the first plan on
    for (int i = 0; i < inferences; i++)
    {
        if (i % switch_every == 0)
        {
            s = executor->set_budget(budgets[i / switch_every % budgets.size()], planner);
            if (!s.ok())
                return fail(s.message());
            if (observe && !observer)
                observer.reset(new Observer(*executor, prepared.profile.tensors.size()));
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
        mapped_weight_bytes += stats.mapped_weight_bytes;
    }
    if (observer)
    {
        observer->stop();
        if (observer->torn() != 0)
            return fail(std::to_string(observer->torn()) + " of the plans read beside the runs were not whole");
    }
    const long observations = observer ? observer->observations() : 0;
    if (!out.empty())
    {
        s = flexnn::write_npy(out, first);
        if (!s.ok())
            return fail(s.message());
    }
    printf("{\"inferences\": %d, \"budgets\": %zu, \"load_wait_us_total\": %.1f, \"observations\": %ld, "
           "\"mapped_weight_bytes_total\": %llu}\n",
           inferences, budgets.size(), load_wait_us, observations, (unsigned long long)mapped_weight_bytes);
    return 0;
}
