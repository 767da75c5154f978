#ifndef FLEXNN_BY_STEP_H
#define FLEXNN_BY_STEP_H

#include <cstdint>
#include <vector>

namespace flexnn {

// Values grouped by step in one table: step s's are of(s), at(s, 0) .. at(s, count(s) - 1). A tiled
// model has thousands of steps, and what a process holds beside the arena grows with them: one
// table, not a vector per step. Sized by counting first, then filled.
template<typename T>
class ByStep
{
public:
    struct Values
    {
        const T* first;
        const T* last;
        const T* begin() const
        {
            return first;
        }
        const T* end() const
        {
            return last;
        }
    };

    ByStep() = default;
    // room for counts[s] values at step s, each T{} until set
    explicit ByStep(const std::vector<uint32_t>& counts)
        : first_(counts.size() + 1, 0)
    {
        for (size_t s = 0; s < counts.size(); s++)
            first_[s + 1] = first_[s] + counts[s];
        values_.assign(first_.back(), T{});
    }

    int steps() const
    {
        return first_.empty() ? 0 : (int)first_.size() - 1;
    }
    int count(int step) const
    {
        return (int)(first_[step + 1] - first_[step]);
    }
    T& at(int step, int i)
    {
        return values_[first_[step] + i];
    }
    const T& at(int step, int i) const
    {
        return values_[first_[step] + i];
    }
    Values of(int step) const
    {
        return {values_.data() + first_[step], values_.data() + first_[step + 1]};
    }

private:
    std::vector<uint32_t> first_;
    std::vector<T> values_;
};

} // namespace flexnn

#endif // FLEXNN_BY_STEP_H
