#ifndef FLEXNN_STEP_CLOCK_H
#define FLEXNN_STEP_CLOCK_H

namespace flexnn {

// Where an inference is on the plan's time axis (step 0 copies the inputs in, steps 1..L compute
// the layers in execution order, step L+1 copies the outputs out), as the allocators see it.
// Between two steps NCNN converts the next layer's inputs (packing, fp16) and releases the last
// layer's: a buffer allocated there belongs to the next step, a buffer released there was last
// read by the previous one. Read and written by one thread only.
class StepClock
{
public:
    void reset()
    {
        started_ = -1;
        running_ = false;
    }
    void begin(int step)
    {
        started_ = step;
        running_ = true;
    }
    void end()
    {
        running_ = false;
    }
    // the last step that began
    int started() const
    {
        return started_;
    }
    // the step a buffer allocated now belongs to
    int allocation_step() const
    {
        return running_ ? started_ : started_ + 1;
    }
    // the last step that may have read a buffer released now
    int release_step() const
    {
        return started_;
    }

private:
    int started_ = -1;
    bool running_ = false;
};

} // namespace flexnn

#endif // FLEXNN_STEP_CLOCK_H
