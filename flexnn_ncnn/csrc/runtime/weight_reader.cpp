#include "runtime/weight_reader.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace flexnn {

WeightFile::~WeightFile()
{
    if (fd_ >= 0)
        close(fd_);
}

Status WeightFile::open(const std::string& path)
{
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0)
        return Status::error("cannot open weights " + path + ": " + strerror(errno));
    path_ = path;
    return Status();
}

void WeightFile::drop_cached(const ByteRange& range) const
{
    if (range.end > range.begin)
        posix_fadvise(fd_, (off_t)range.begin, (off_t)(range.end - range.begin), POSIX_FADV_DONTNEED);
}

WeightReader::WeightReader(const WeightFile& file, ByteRange range)
    : file_(file), range_(range), position_(range.begin)
{
}

size_t WeightReader::read(void* buf, size_t size) const
{
    const uint64_t wanted_end = position_ + size;
    const size_t allowed = wanted_end <= range_.end ? size : (size_t)(range_.end > position_ ? range_.end - position_ : 0);
    size_t done = 0;
    while (done < allowed)
    {
        ssize_t n = pread(file_.fd(), (unsigned char*)buf + done, allowed - done, (off_t)(position_ + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    if (done < size && error_.empty())
    {
        error_ = file_.path() + " ended at byte " + std::to_string(position_ + done) + ", " + std::to_string(wanted_end)
                 + " expected" + (allowed < size ? " (past the layer's planned bytes)" : "");
    }
    position_ += done;
    return done;
}

} // namespace flexnn
