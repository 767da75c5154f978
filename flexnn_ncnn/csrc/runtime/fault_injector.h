#ifndef FLEXNN_FAULT_INJECTOR_H
#define FLEXNN_FAULT_INJECTOR_H

#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>

namespace flexnn {

// Faults a test injects into an executor (Executor::inject_faults), NCNN's way of proving error
// paths: fail each allocation of a run in turn (the inference fails, the request is served from the
// heap: NCNN's kernels do not all check an allocation), throw std::bad_alloc from each in turn (where
// a layer is built, where it computes, where inputs are copied in), delay both threads at random. Each must end the run in a clean error that leaves the executor able to run
// again, with nothing leaked and no thread waiting.
struct FaultPlan
{
    int fail_request = 0;    // the k-th request (from 1) an arena allocator serves on its owner thread fails
    int throw_request = 0;   // the k-th such request throws std::bad_alloc
    bool fail_arena = false; // the next arena set_plan allocates cannot be had (once: the old plan's again can)
    int max_delay_us = 0;    // each load and each computation first sleeps 0..max_delay_us
    uint32_t seed = 0;       // of the delays
};

class FaultInjector
{
public:
    enum class Request
    {
        Serve,
        Fail,
        Throw,
    };

    // between runs
    void arm(const FaultPlan& plan);
    // a run begins: requests are counted from 1 again
    void begin_run();
    // what to do with the next request (any thread; counted once each)
    Request on_request();
    // requests counted since begin_run
    int requests() const
    {
        return requests_.load();
    }
    // whether this arena allocation fails (true once per armed fail_arena)
    bool take_arena_failure()
    {
        const bool fails = plan_.fail_arena;
        plan_.fail_arena = false;
        return fails;
    }
    // sleep as the plan says (any thread)
    void delay();

private:
    FaultPlan plan_;
    std::atomic<int> requests_{0};
    std::mutex lock_; // rng_
    std::mt19937 rng_;
};

} // namespace flexnn

#endif // FLEXNN_FAULT_INJECTOR_H
