#ifndef FLEXNN_STEP_CLOCK_H
#define FLEXNN_STEP_CLOCK_H

#include <atomic>

namespace flexnn {

// Where an inference is on the plan's time axis (step 0 copies the inputs in, steps 1..L compute
// the layers in execution order, step L+1 copies the outputs out), as the allocators see it.
// Between two steps NCNN converts the next layer's inputs (packing, fp16) and releases the last
// layer's: a buffer allocated there belongs to the next step, a buffer released there was last
// read by the previous one. Written by one thread; read by it, and by the threads it runs inside a
// step (OpenMP workers), which only name the step with what they read.
class StepClock
{
public:
    void reset()
    {
        started_.store(-1, std::memory_order_relaxed);
        running_.store(false, std::memory_order_relaxed);
    }
    void begin(int step)
    {
        started_.store(step, std::memory_order_relaxed);
        running_.store(true, std::memory_order_relaxed);
    }
    void end()
    {
        running_.store(false, std::memory_order_relaxed);
    }
    // the last step that began
    int started() const
    {
        return started_.load(std::memory_order_relaxed);
    }
    // the step a buffer allocated now belongs to
    int allocation_step() const
    {
        const int started = started_.load(std::memory_order_relaxed);
        return running_.load(std::memory_order_relaxed) ? started : started + 1;
    }
    // the last step that may have read a buffer released now
    int release_step() const
    {
        return started_.load(std::memory_order_relaxed);
    }

private:
    std::atomic<int> started_{-1};
    std::atomic<bool> running_{false};
};

} // namespace flexnn

#endif // FLEXNN_STEP_CLOCK_H
