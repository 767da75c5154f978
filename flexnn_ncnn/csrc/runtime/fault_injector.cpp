#include "runtime/fault_injector.h"

#include <chrono>
#include <thread>

namespace flexnn {

void FaultInjector::arm(const FaultPlan& plan)
{
    plan_ = plan;
    std::lock_guard<std::mutex> guard(lock_);
    rng_.seed(plan.seed);
}

void FaultInjector::begin_run()
{
    requests_.store(0);
}

FaultInjector::Request FaultInjector::on_request()
{
    const int k = requests_.fetch_add(1) + 1;
    if (k == plan_.fail_request)
        return Request::Fail;
    if (k == plan_.throw_request)
        return Request::Throw;
    return Request::Serve;
}

void FaultInjector::delay()
{
    if (plan_.max_delay_us <= 0)
        return;
    int us = 0;
    {
        std::lock_guard<std::mutex> guard(lock_);
        us = std::uniform_int_distribution<int>(0, plan_.max_delay_us)(rng_);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(us));
}

} // namespace flexnn
