#ifndef FLEXNN_DIRECT_WINDOW_H
#define FLEXNN_DIRECT_WINDOW_H

#include "runtime/status.h"

#include <allocator.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace flexnn {

// O_DIRECT reads of a .bin whose records are not block-aligned: a small aligned bounce buffer holds
// one aligned window of the file at a time, and bytes are copied from it to where they are wanted.
// Invariant: the window's file range [begin_, end_) starts on a kAlignment boundary, and its bytes
// are the file's since the last forget(). One thread reads at a time (the executor's loads take turns).
class DirectWindow
{
public:
    // offset, length and buffer address of every O_DIRECT read are multiples of this (the largest
    // logical block size in common use)
    static constexpr size_t kAlignment = 4096;
    static constexpr size_t kMaxBytes = size_t(1) << 20;

    DirectWindow() = default;
    ~DirectWindow();
    DirectWindow(const DirectWindow&) = delete;
    DirectWindow& operator=(const DirectWindow&) = delete;

    // the window's size for reads inside any of `largest_range` bytes: enough to cover their
    // enclosing aligned range, at most kMaxBytes
    static size_t size_for(uint64_t largest_range);
    // allocate `bytes` (a multiple of kAlignment) from `heap` (which counts it: memory outside the arena)
    Status allocate(size_t bytes, ncnn::Allocator* heap);
    // what the window holds from the heap, alignment slack included
    size_t allocated_bytes() const
    {
        return buffer_ ? capacity_ + kAlignment : 0;
    }

    // drop what the window holds (the file may have changed since it was read)
    void forget()
    {
        begin_ = end_ = 0;
    }
    // Copy the file's bytes [offset, offset + size) to dst, reading aligned blocks (never past the
    // aligned end of `limit`, the end of the bytes the caller may want). Returns the bytes copied:
    // fewer when the file ends first; error says why when a read failed.
    size_t copy(int fd, const std::string& path, uint64_t offset, void* dst, size_t size, uint64_t limit, std::string& error);

private:
    ncnn::Allocator* heap_ = nullptr;
    void* buffer_ = nullptr;         // as the heap returned it
    unsigned char* aligned_ = nullptr; // buffer_ rounded up to kAlignment
    size_t capacity_ = 0;
    uint64_t begin_ = 0;
    uint64_t end_ = 0; // == begin_: nothing held
};

} // namespace flexnn

#endif // FLEXNN_DIRECT_WINDOW_H
