#include "runtime/mapped_net.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace flexnn {

MappedNet::~MappedNet()
{
    net_.clear();
    if (mapping_)
        munmap(mapping_, mapped_bytes_);
}

Status MappedNet::open(const std::string& param_path, const std::string& bin_path, const RuntimeOptions& options,
                       std::unique_ptr<MappedNet>& out)
{
    std::unique_ptr<MappedNet> m(new MappedNet);
    // NCNN's own options, as a user runs it (its pool allocators included), with the threads,
    // kernels and precision asked for
    ncnn::Option& opt = m->net_.opt;
    opt.lightmode = true;
    opt.num_threads = options.num_threads;
    opt.use_packing_layout = options.use_packing_layout;
    opt.use_winograd_convolution = options.use_winograd;
    opt.use_sgemm_convolution = options.use_sgemm;
    if (!options.use_fp16)
    {
        opt.use_fp16_storage = false;
        opt.use_fp16_packed = false;
        opt.use_fp16_arithmetic = false;
    }
    opt.use_vulkan_compute = false;
    if (m->net_.load_param(param_path.c_str()) != 0)
        return Status::error("cannot load " + param_path);
    const int fd = ::open(bin_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return Status::error("cannot open " + bin_path + ": " + strerror(errno));
    struct stat st;
    const bool sized = fstat(fd, &st) == 0 && st.st_size > 0;
    void* p = sized ? mmap(nullptr, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    const int mapping_errno = errno;
    close(fd); // the mapping keeps the file
    if (p == MAP_FAILED)
        return Status::error("cannot map " + bin_path + (sized ? std::string(": ") + strerror(mapping_errno) : ": empty"));
    m->mapping_ = p;
    m->mapped_bytes_ = (size_t)st.st_size;
    const size_t read = m->net_.load_model(static_cast<const unsigned char*>(p));
    if (read == 0 || read > m->mapped_bytes_)
        return Status::error("cannot load weights " + bin_path + " for " + param_path);
    out = std::move(m);
    return Status();
}

Status MappedNet::run(const NamedMats& inputs, const std::vector<std::string>& output_names, NamedMats& outputs)
{
    ncnn::Extractor ex = net_.create_extractor();
    for (const auto& input : inputs)
        if (ex.input(input.first.c_str(), input.second) != 0)
            return Status::error("model has no input blob '" + input.first + "'");
    outputs.clear();
    for (const std::string& name : output_names)
    {
        ncnn::Mat mat;
        if (ex.extract(name.c_str(), mat) != 0)
            return Status::error("cannot extract blob '" + name + "'");
        outputs.emplace_back(name, mat.clone());
    }
    return Status();
}

} // namespace flexnn
