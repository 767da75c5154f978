#ifndef FLEXNN_WEIGHT_READER_H
#define FLEXNN_WEIGHT_READER_H

#include "runtime/direct_window.h"
#include "runtime/status.h"

#include <datareader.h>

#include <cstdint>
#include <string>

namespace flexnn {

// pread until `size` bytes, the file's end or an error: the bytes read. With threads > 1 a read of
// kSplitReadBytes or more is split into that many page-aligned parts read by an OpenMP team (the
// calling thread's, outside any parallel region); the bytes read are then the leading ones. A
// mapped record that large is faulted in by the team likewise (MappedWeights).
constexpr size_t kSplitReadBytes = 256 * 1024;
size_t pread_all(int fd, void* buf, size_t size, uint64_t offset, int threads = 1);

// open `path` read-only (with O_DIRECT when `direct`: a file system that refuses it is an error,
// never a silent fallback); `what` names the file in errors, e.g. "weights /a/b.bin"
Status open_for_reading(const std::string& path, const std::string& what, bool direct, int& fd);

// A layer's bytes in the .bin: [begin, end).
struct ByteRange
{
    uint64_t begin = 0;
    uint64_t end = 0;
};

// The model's .bin, opened once, read with positional reads only: readers of different layers
// never share a file position, and several may exist at once.
class WeightFile
{
public:
    WeightFile() = default;
    ~WeightFile();
    WeightFile(const WeightFile&) = delete;
    WeightFile& operator=(const WeightFile&) = delete;

    // direct: O_DIRECT, bypassing the page cache (reads then go through a DirectWindow); a file
    // system that refuses it is an error naming the file, never a silent fallback
    Status open(const std::string& path, bool direct = false);
    bool direct() const
    {
        return direct_;
    }
    const std::string& path() const
    {
        return path_;
    }
    int fd() const
    {
        return fd_;
    }
    // tell the kernel the page cache need not keep these bytes (posix_fadvise DONTNEED)
    void drop_cached(const ByteRange& range) const;

private:
    std::string path_;
    int fd_ = -1;
    bool direct_ = false;
};

// NCNN's view of one layer's bytes: ModelBin's reads go with pread straight into the buffer NCNN
// allocated for the weight (which the weights allocator placed at its planned arena offset), so
// there is no staging copy. Reading past the range's end, or a file shorter than it, is a short
// read, which NCNN's ModelBin turns into a failed load; error() then says what was missing.
// A file opened for O_DIRECT is read through `window` instead (aligned blocks, then a copy).
class WeightReader : public ncnn::DataReader
{
public:
    // threads: how many share each large read (pread_all)
    WeightReader(const WeightFile& file, ByteRange range, DirectWindow* window = nullptr, int threads = 1);
    size_t read(void* buf, size_t size) const override;

    // the file position of the next read
    uint64_t position() const
    {
        return position_;
    }
    // move on to `position` (not before the current one) without reading the bytes in between
    void skip_to(uint64_t position)
    {
        if (position > position_)
            position_ = position;
    }
    // empty unless a read came up short
    const std::string& error() const
    {
        return error_;
    }

private:
    const WeightFile& file_;
    const ByteRange range_;
    DirectWindow* const window_;
    const int threads_;
    mutable uint64_t position_;
    mutable std::string error_;
};

} // namespace flexnn

#endif // FLEXNN_WEIGHT_READER_H
