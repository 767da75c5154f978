#include "runtime/mapped_weights.h"

#include "planner/plan.h"
#include "runtime/transformed_weights.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace flexnn {

MappedWeights::~MappedWeights()
{
    for (auto& layer : layers_)
        unmap(layer.second);
}

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

void MappedWeights::unmap(std::vector<Region>& regions)
{
    for (const Region& r : regions)
    {
        munmap(r.address, r.length);
        mapped_bytes_ -= r.length;
    }
    regions.clear();
}

Status MappedWeights::map_layer(int layer, const LayerTransforms& transforms)
{
    std::vector<Region>& regions = layers_[layer];
    unmap(regions);
    current_ = layer;
    // a mapped page past the file's end faults (SIGBUS) where a read would come up short: a file
    // shrunk since it was opened is refused before any of it is mapped
    struct stat st;
    if (fstat(fd_, &st) != 0 || (uint64_t)st.st_size < file_bytes_)
        return Status::error(path_ + " shrank to " + std::to_string(fstat(fd_, &st) == 0 ? (uint64_t)st.st_size : 0)
                             + " B since it was opened (" + std::to_string(file_bytes_) + " B): prepare the model again");
    for (const TransformedMat& m : transforms.mats)
    {
        if (m.offset % kMappedPage != 0 || m.offset > file_bytes_ || m.bytes > file_bytes_ - m.offset)
            return Status::error(path_ + ": a record at byte " + std::to_string(m.offset) + " lies outside the file");
        // the record's pages and the one NCNN may over-read past its end, within the file's last page
        const uint64_t end = std::min(align_up(m.offset + m.bytes, kMappedPage) + kMappedPage, align_up(file_bytes_, kMappedPage));
        void* p = mmap(nullptr, (size_t)(end - m.offset), PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd_, (off_t)m.offset);
        if (p == MAP_FAILED)
            return Status::error("cannot map " + path_ + " at byte " + std::to_string(m.offset) + ": " + strerror(errno));
        regions.push_back({m.offset, static_cast<unsigned char*>(p), (size_t)(end - m.offset)});
        mapped_bytes_ += end - m.offset;
        peak_bytes_ = std::max(peak_bytes_, mapped_bytes_);
    }
    return Status();
}

bool MappedWeights::point(const TransformedMat& m, ncnn::Mat& weight, std::string& error) const
{
    const auto layer = layers_.find(current_);
    const Region* region = nullptr;
    if (layer != layers_.end())
        for (const Region& r : layer->second)
            if (r.offset == m.offset)
                region = &r;
    if (!region)
    {
        error = "its record at byte " + std::to_string(m.offset) + " is not mapped";
        return false;
    }
    // what Mat::create would have asked the weights allocator for
    if (!slots_.pass(ncnn::alignSize((size_t)m.bytes, 4) + sizeof(int)))
    {
        error = "the plan has no buffer for it";
        return false;
    }
    void* data = region->address;
    const size_t elemsize = m.elemsize;
    if (m.dims == 1)
        weight = ncnn::Mat(m.w, data, elemsize, m.elempack);
    else if (m.dims == 2)
        weight = ncnn::Mat(m.w, m.h, data, elemsize, m.elempack);
    else if (m.dims == 3)
        weight = ncnn::Mat(m.w, m.h, m.c, data, elemsize, m.elempack);
    else
        weight = ncnn::Mat(m.w, m.h, m.d, m.c, data, elemsize, m.elempack);
    if ((uint64_t)weight.total() * weight.elemsize != m.bytes)
    {
        error = "its shape does not fill the recorded " + std::to_string(m.bytes) + " B";
        weight.release();
        return false;
    }
    return true;
}

void MappedWeights::unmap_layer(int layer)
{
    const auto it = layers_.find(layer);
    if (it != layers_.end())
        unmap(it->second);
}

void drop_pages(unsigned char* p, uint64_t bytes)
{
    madvise(p, bytes, MADV_DONTNEED);
}

} // namespace flexnn
