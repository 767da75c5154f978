#include "runtime/mapped_weights.h"

#include "planner/plan.h"
#include "planner/profile.h"
#include "runtime/transformed_weights.h"
#include "runtime/weight_reader.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace flexnn {

Status MappedWeights::open(int fd, const std::string& path)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return Status::error("cannot map transformed weights " + path + ": " + strerror(errno));
    fd_ = fd;
    path_ = path;
    file_bytes_ = (uint64_t)st.st_size;
    return Status();
}

Status MappedWeights::begin_layer(int layer)
{
    current_ = layer;
    // a mapped page past the file's end faults (SIGBUS) where a read would come up short: a file
    // shrunk since it was opened is refused before any of it is mapped
    struct stat st;
    if (fstat(fd_, &st) != 0 || (uint64_t)st.st_size < file_bytes_)
        return Status::error(path_ + " shrank to " + std::to_string(fstat(fd_, &st) == 0 ? (uint64_t)st.st_size : 0)
                             + " B since it was opened (" + std::to_string(file_bytes_) + " B): prepare the model again");
    return Status();
}

bool MappedWeights::point(const TransformedMat& m, ncnn::Mat& weight, int threads, std::string& error)
{
    if (m.offset % kMappedPage != 0 || m.offset > file_bytes_ || m.bytes > file_bytes_ - m.offset)
    {
        error = "its record at byte " + std::to_string(m.offset) + " lies outside the file";
        return false;
    }
    // where Mat::create would have put it: the bytes the plan gives this request
    unsigned char* address = slots_.pass(ncnn::alignSize((size_t)m.bytes, 4) + sizeof(int));
    if (!address)
    {
        error = "the plan has no arena bytes for it";
        return false;
    }
    if ((uintptr_t)address % kMappedPage != 0)
    {
        error = "the plan puts it off a page: plan with mapped weights";
        return false;
    }
    // the record's pages and the one NCNN may over-read past its end, within the file's last page
    // (past it the planned bytes stay the arena's)
    const uint64_t end = std::min(align_up(m.offset + m.bytes, kMappedPage) + kMappedPage, align_up(file_bytes_, kMappedPage));
    const size_t length = (size_t)(end - m.offset);
    if (mmap(address, length, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd_, (off_t)m.offset) == MAP_FAILED)
    {
        error = "cannot map it at byte " + std::to_string(m.offset) + ": " + strerror(errno);
        // a failed MAP_FIXED may have unmapped the bytes: they are the arena's again either way
        anonymous(address, length);
        return false;
    }
    fault_in(address, length, threads);
    {
        std::lock_guard<std::mutex> lock(regions_lock_);
        regions_[current_].push_back({address, length});
        mapped_bytes_ += length;
        peak_bytes_ = std::max(peak_bytes_, mapped_bytes_);
    }
    const size_t elemsize = m.elemsize;
    if (m.dims == 1)
        weight = ncnn::Mat(m.w, address, elemsize, m.elempack);
    else if (m.dims == 2)
        weight = ncnn::Mat(m.w, m.h, address, elemsize, m.elempack);
    else if (m.dims == 3)
        weight = ncnn::Mat(m.w, m.h, m.c, address, elemsize, m.elempack);
    else
        weight = ncnn::Mat(m.w, m.h, m.d, m.c, address, elemsize, m.elempack);
    if ((uint64_t)weight.total() * weight.elemsize != m.bytes)
    {
        error = "its shape does not fill the recorded " + std::to_string(m.bytes) + " B";
        weight.release();
        return false;
    }
    return true;
}

void MappedWeights::fault_in(const unsigned char* address, size_t length, int threads)
{
    // made resident ahead of the computation: one read fault per window (the first page, then each
    // window boundary), each mapping the window's cached pages at once (fault-around; an uncached
    // page is read, with the kernel's readahead). MAP_POPULATE walks every page instead, and costs
    // more on the cores the computing threads share; pages a smaller window leaves out fault in
    // when the kernels first read them. With `threads` (the computing team loading), the windows
    // of a large record are shared among them: a fault takes the mapping's lock for reading only.
    const volatile unsigned char* bytes = address;
    const uintptr_t begin = (uintptr_t)address;
    const uintptr_t first = begin / kFaultAroundBytes;
    const int64_t windows = (int64_t)((begin + length - 1) / kFaultAroundBytes - first) + 1;
    // window w's first byte: the record's own for window 0
    const auto touch = [&](int64_t w) { (void)bytes[w == 0 ? 0 : (first + w) * kFaultAroundBytes - begin]; };
    if (threads <= 1 || length < kSplitReadBytes)
    {
        for (int64_t w = 0; w < windows; w++)
            touch(w);
        return;
    }
    #pragma omp parallel for num_threads(threads)
    for (int64_t w = 0; w < windows; w++)
        touch(w);
}

Status MappedWeights::anonymous(unsigned char* address, size_t length) const
{
    // private anonymous pages over the file's: the arena's bytes again, zero until written
    if (mmap(address, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED | MAP_ANONYMOUS, -1, 0) == MAP_FAILED)
        return Status::error("cannot give back the arena bytes of a mapped record of " + path_ + ": " + strerror(errno));
    return Status();
}

Status MappedWeights::give_back(int layer, unsigned char* base, ByStep<std::pair<uint64_t, uint64_t> >::Values pages)
{
    for (const auto& p : pages)
    {
        Status s = anonymous(base + p.first, (size_t)p.second);
        if (!s.ok())
            return s;
    }
    std::lock_guard<std::mutex> lock(regions_lock_);
    const auto it = regions_.find(layer);
    if (it != regions_.end())
    {
        for (const Region& r : it->second)
            mapped_bytes_ -= r.length;
        regions_.erase(it);
    }
    return Status();
}

Status MappedWeights::restore(int layer)
{
    std::lock_guard<std::mutex> lock(regions_lock_);
    const auto it = regions_.find(layer);
    if (it == regions_.end())
        return Status();
    std::vector<Region>& regions = it->second;
    while (!regions.empty())
    {
        const Region r = regions.back();
        Status s = anonymous(r.address, r.length);
        if (!s.ok())
            return s;
        regions.pop_back();
        mapped_bytes_ -= r.length;
    }
    regions_.erase(it);
    return Status();
}

Status MappedWeights::restore_all(unsigned char* base, uint64_t bytes)
{
    std::lock_guard<std::mutex> lock(regions_lock_);
    if (!base || fd_ < 0)
        return Status();
    Status s = anonymous(base, (size_t)(bytes / kMappedPage * kMappedPage));
    if (s.ok())
    {
        regions_.clear();
        mapped_bytes_ = 0;
    }
    return s;
}

uint64_t MappedWeights::peak_bytes() const
{
    std::lock_guard<std::mutex> lock(regions_lock_);
    return peak_bytes_;
}

void MappedWeights::reset_peak()
{
    std::lock_guard<std::mutex> lock(regions_lock_);
    peak_bytes_ = mapped_bytes_;
}

} // namespace flexnn
