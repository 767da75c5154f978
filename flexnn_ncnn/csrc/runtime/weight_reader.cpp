#include "runtime/weight_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <vector>

namespace flexnn {

namespace {

size_t pread_serial(int fd, unsigned char* buf, size_t size, uint64_t offset)
{
    size_t done = 0;
    while (done < size)
    {
        ssize_t n = pread(fd, buf + done, size - done, (off_t)(offset + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    return done;
}

} // namespace

size_t pread_all(int fd, void* buf, size_t size, uint64_t offset, int threads)
{
    unsigned char* bytes = (unsigned char*)buf;
    if (threads <= 1 || size < kSplitReadBytes)
        return pread_serial(fd, bytes, size, offset);
    const size_t page = 4096;
    const size_t part = (size / threads + page - 1) / page * page;
    std::vector<size_t> got(threads, 0);
    #pragma omp parallel for num_threads(threads)
    for (int i = 0; i < threads; i++)
    {
        const size_t begin = std::min(size, part * i), end = std::min(size, part * (i + 1));
        got[i] = pread_serial(fd, bytes + begin, end - begin, offset + begin);
    }
    size_t done = 0;
    for (int i = 0; i < threads; i++)
    {
        done += got[i];
        if (done < std::min(size, part * (i + 1))) // a short part: what follows it is not contiguous
            break;
    }
    return done;
}

WeightFile::~WeightFile()
{
    if (fd_ >= 0)
        close(fd_);
}

Status open_for_reading(const std::string& path, const std::string& what, bool direct, int& fd)
{
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
    if (fd < 0 && direct && errno == EINVAL)
        return Status::error("cannot open " + what + " with O_DIRECT: its file system refuses direct I/O");
    if (fd < 0)
        return Status::error("cannot open " + what + ": " + strerror(errno));
    return Status();
}

Status WeightFile::open(const std::string& path, bool direct)
{
    Status s = open_for_reading(path, "weights " + path, direct, fd_);
    if (!s.ok())
        return s;
    path_ = path;
    direct_ = direct;
    return Status();
}

void WeightFile::drop_cached(const ByteRange& range) const
{
    if (range.end > range.begin)
        posix_fadvise(fd_, (off_t)range.begin, (off_t)(range.end - range.begin), POSIX_FADV_DONTNEED);
}

WeightReader::WeightReader(const WeightFile& file, ByteRange range, DirectWindow* window, int threads)
    : file_(file), range_(range), window_(window), threads_(threads), position_(range.begin)
{
    if (window_)
        window_->forget(); // the file may have changed since its last load
}

size_t WeightReader::read(void* buf, size_t size) const
{
    const uint64_t wanted_end = position_ + size;
    const size_t allowed = wanted_end <= range_.end ? size : (size_t)(range_.end > position_ ? range_.end - position_ : 0);
    size_t done = 0;
    if (!file_.direct())
        done = pread_all(file_.fd(), buf, allowed, position_, threads_);
    else if (window_)
        done = window_->copy(file_.fd(), file_.path(), position_, buf, allowed, range_.end, error_);
    else
        error_ = file_.path() + " is open for O_DIRECT but its reader has no aligned window";
    if (done < size && error_.empty()) // (a failed O_DIRECT read has said why)
    {
        error_ = file_.path() + " ended at byte " + std::to_string(position_ + done) + ", " + std::to_string(wanted_end)
                 + " expected" + (allowed < size ? " (past the layer's planned bytes)" : "");
    }
    position_ += done;
    return done;
}

} // namespace flexnn
