#ifndef FLEXNN_FAILURE_H
#define FLEXNN_FAILURE_H

#include "runtime/status.h"

#include <atomic>
#include <mutex>
#include <string>

namespace flexnn {

// The first error of an inference, shared by the loading and the computing threads: whoever
// fails first records why; everyone else sees that the inference is failing and stops.
class Failure
{
public:
    void set(const std::string& message)
    {
        std::lock_guard<std::mutex> guard(lock_);
        if (message_.empty())
            message_ = message.empty() ? "unknown error" : message;
        failed_.store(true, std::memory_order_release);
    }
    bool failed() const
    {
        return failed_.load(std::memory_order_acquire);
    }
    Status status() const
    {
        std::lock_guard<std::mutex> guard(lock_);
        return message_.empty() ? Status() : Status::error(message_);
    }
    void clear()
    {
        std::lock_guard<std::mutex> guard(lock_);
        message_.clear();
        failed_.store(false, std::memory_order_release);
    }

private:
    mutable std::mutex lock_;
    std::string message_;
    std::atomic<bool> failed_{false};
};

} // namespace flexnn

#endif // FLEXNN_FAILURE_H
