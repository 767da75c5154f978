#ifndef FLEXNN_ARENA_CANARY_H
#define FLEXNN_ARENA_CANARY_H

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace flexnn {

// A debug check of the plan inside one arena, where no sanitizer sees (RuntimeOptions::canaries).
// Invariant: every byte of the arena that no live tensor holds carries the poison pattern. Bytes are
// poisoned when the arena is bound, at the start of every inference (all but the resident weights
// already built), when an activation or intermediate is released, and when a streamed weight's
// layer has computed. A request served in the arena first checks that its bytes are still poisoned:
// a byte written since proves that something wrote a dead tensor, or that the plan placed the
// request over a tensor still alive.
class ArenaCanary
{
public:
    static const unsigned char kPoison = 0xA5;

    void bind(unsigned char* base, uint64_t bytes);
    bool armed() const
    {
        return base_ != nullptr;
    }
    // the bytes watched, from the arena's start
    uint64_t bytes() const
    {
        return bytes_;
    }
    // poison the whole arena but `kept` (offset, size) ranges
    void poison_all_but(const std::vector<std::pair<uint64_t, uint64_t> >& kept);
    void poison(uint64_t offset, uint64_t size);
    // the first byte of [offset, offset + size) written since it was poisoned, or -1
    int64_t first_written(uint64_t offset, uint64_t size) const;

    // served requests, so that a release (any thread) poisons what it held
    void served(void* ptr, uint64_t size);
    // poison what `ptr` held; false when it is not a served request of the arena
    bool released(void* ptr);

private:
    unsigned char* base_ = nullptr;
    uint64_t bytes_ = 0;
    std::mutex lock_; // served_
    std::unordered_map<void*, uint64_t> served_;
};

} // namespace flexnn

#endif // FLEXNN_ARENA_CANARY_H
