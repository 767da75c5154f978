#include "runtime/direct_window.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace flexnn {

namespace {

uint64_t align_down(uint64_t x)
{
    return x / DirectWindow::kAlignment * DirectWindow::kAlignment;
}

uint64_t align_up(uint64_t x)
{
    return align_down(x + DirectWindow::kAlignment - 1);
}

} // namespace

DirectWindow::~DirectWindow()
{
    if (buffer_)
        heap_->fastFree(buffer_);
}

size_t DirectWindow::size_for(uint64_t largest_range)
{
    // a range of n bytes at any offset lies within align_up(n) + kAlignment aligned bytes
    return (size_t)std::min<uint64_t>(kMaxBytes, align_up(largest_range) + kAlignment);
}

Status DirectWindow::allocate(size_t bytes, ncnn::Allocator* heap)
{
    if (bytes == 0 || bytes % kAlignment != 0)
        return Status::error("an O_DIRECT window of " + std::to_string(bytes) + " B is not a multiple of "
                             + std::to_string(kAlignment));
    void* buffer = heap->fastMalloc(bytes + kAlignment);
    if (!buffer)
        return Status::error("cannot allocate an O_DIRECT window of " + std::to_string(bytes) + " B");
    if (buffer_)
        heap_->fastFree(buffer_);
    heap_ = heap;
    buffer_ = buffer;
    aligned_ = (unsigned char*)align_up((uintptr_t)buffer);
    capacity_ = bytes;
    forget();
    return Status();
}

size_t DirectWindow::copy(int fd, const std::string& path, uint64_t offset, void* dst, size_t size, uint64_t limit, std::string& error)
{
    size_t done = 0;
    while (done < size)
    {
        const uint64_t at = offset + done;
        if (at < begin_ || at >= end_)
        {
            // refill: the aligned blocks from `at` on, as far as the window and `limit` allow
            begin_ = align_down(at);
            const uint64_t want = std::min<uint64_t>(capacity_, std::max(align_up(limit), begin_ + kAlignment) - begin_);
            ssize_t n;
            do
                n = pread(fd, aligned_, (size_t)want, (off_t)begin_);
            while (n < 0 && errno == EINTR);
            end_ = begin_ + (uint64_t)std::max<ssize_t>(n, 0);
            if (n < 0)
            {
                error = "O_DIRECT read of " + path + " at byte " + std::to_string(begin_) + " failed: " + strerror(errno);
                return done;
            }
            if (at >= end_)
                return done; // the file ends before `at`
        }
        const size_t chunk = (size_t)std::min<uint64_t>(size - done, end_ - at);
        memcpy((unsigned char*)dst + done, aligned_ + (at - begin_), chunk);
        done += chunk;
    }
    return done;
}

} // namespace flexnn
