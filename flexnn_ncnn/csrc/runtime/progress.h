#ifndef FLEXNN_PROGRESS_H
#define FLEXNN_PROGRESS_H

#include <condition_variable>
#include <mutex>

namespace flexnn {

// How far one inference's loading and computing have got. Both go through the steps in order, so
// one number each says what is done. A wait returns false when what it waits for can no longer
// happen: the inference stopped (an error, or computing ended without reaching the step).
class Progress
{
public:
    void reset()
    {
        std::lock_guard<std::mutex> guard(lock_);
        loaded_ = computed_ = -1;
        stopped_ = false;
    }
    void loaded(int step)
    {
        update(loaded_, step);
    }
    void computed(int step)
    {
        update(computed_, step);
    }
    // no more progress will be made: every waiter returns
    void stop()
    {
        {
            std::lock_guard<std::mutex> guard(lock_);
            stopped_ = true;
        }
        changed_.notify_all();
    }
    bool wait_loaded(int step)
    {
        return wait(loaded_, step);
    }
    bool wait_computed(int step)
    {
        return wait(computed_, step);
    }

private:
    void update(int& value, int step)
    {
        {
            std::lock_guard<std::mutex> guard(lock_);
            if (step > value)
                value = step;
        }
        changed_.notify_all();
    }
    bool wait(const int& value, int step)
    {
        std::unique_lock<std::mutex> guard(lock_);
        changed_.wait(guard, [&] { return value >= step || stopped_; });
        return value >= step;
    }

    std::mutex lock_;
    std::condition_variable changed_;
    int loaded_ = -1;
    int computed_ = -1;
    bool stopped_ = false;
};

} // namespace flexnn

#endif // FLEXNN_PROGRESS_H
