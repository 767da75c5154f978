#include "runtime/transformed_weights.h"

#include "runtime/build_info.h"

#include <cpu.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace flexnn {

namespace {

// Layout: [0, kHeaderBytes) header: magic, version, key length, index offset, index length, key
// text; then records, each at a multiple of kAlignment; then the index (binary, little-endian
// host order: the file is made and used on one machine).
const char kMagic[8] = {'F', 'L', 'X', 'N', 'N', 'T', 'W', '1'};
const uint32_t kVersion = 1;
const uint64_t kAlignment = DirectWindow::kAlignment;
const uint64_t kHeaderBytes = kAlignment;

struct Header
{
    char magic[8];
    uint32_t version;
    uint32_t key_bytes;
    uint64_t index_offset;
    uint64_t index_bytes;
};

uint64_t align_up(uint64_t n)
{
    return (n + kAlignment - 1) / kAlignment * kAlignment;
}

template<typename T>
void put(std::string& out, T value)
{
    out.append((const char*)&value, sizeof(T));
}

template<typename T>
bool get(const std::string& in, size_t& at, T& value)
{
    if (at + sizeof(T) > in.size())
        return false;
    memcpy(&value, in.data() + at, sizeof(T));
    at += sizeof(T);
    return true;
}

bool pwrite_all(int fd, const void* buf, size_t size, uint64_t offset)
{
    size_t done = 0;
    while (done < size)
    {
        ssize_t n = pwrite(fd, (const unsigned char*)buf + done, size - done, (off_t)(offset + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        done += (size_t)n;
    }
    return true;
}

// FNV-1a over a record's 8-byte words (then its last bytes): which earlier records it may repeat
uint64_t record_hash(const void* data, uint64_t bytes)
{
    const unsigned char* p = (const unsigned char*)data;
    uint64_t h = 14695981039346656037ull ^ bytes;
    uint64_t i = 0;
    for (uint64_t word; i + 8 <= bytes; i += 8)
    {
        memcpy(&word, p + i, 8);
        h = (h ^ word) * 1099511628211ull;
    }
    for (; i < bytes; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

// whether the `bytes` at `offset` of `fd` are `data`'s
bool same_on_disk(int fd, uint64_t offset, const void* data, uint64_t bytes)
{
    std::vector<unsigned char> chunk((size_t)std::min<uint64_t>(bytes, 1u << 20));
    for (uint64_t done = 0; done < bytes;)
    {
        const size_t n = (size_t)std::min<uint64_t>(bytes - done, chunk.size());
        if (pread_all(fd, chunk.data(), n, offset + done) != n || memcmp(chunk.data(), (const unsigned char*)data + done, n) != 0)
            return false;
        done += n;
    }
    return true;
}

std::string encode_index(const std::map<int, LayerTransforms>& layers)
{
    std::string out;
    put<uint32_t>(out, (uint32_t)layers.size());
    for (const auto& kv : layers)
    {
        put<int32_t>(out, kv.first);
        put<uint32_t>(out, (uint32_t)kv.second.mats.size());
        for (const TransformedMat& m : kv.second.mats)
        {
            for (int v : {m.dims, m.w, m.h, m.d, m.c, m.elempack})
                put<int32_t>(out, v);
            put<uint32_t>(out, m.elemsize);
            put<uint64_t>(out, m.offset);
            put<uint64_t>(out, m.bytes);
        }
        put<uint32_t>(out, (uint32_t)kv.second.skipped.size());
        for (const SkippedLoad& k : kv.second.skipped)
        {
            put<int32_t>(out, k.call);
            put<uint64_t>(out, k.end);
            put<uint32_t>(out, k.elemsize);
            put<uint64_t>(out, k.bytes);
        }
    }
    return out;
}

// bytes of one entry in the index, as encode_index writes it
constexpr size_t kMatEntryBytes = 6 * sizeof(int32_t) + sizeof(uint32_t) + 2 * sizeof(uint64_t);
constexpr size_t kSkippedEntryBytes = sizeof(int32_t) + sizeof(uint64_t) + sizeof(uint32_t) + sizeof(uint64_t);

// whether `count` entries of `entry_bytes` can still follow `at`: a count is checked before anything
// is sized by it, so a corrupt one fails here instead of in an allocation
bool fits(const std::string& in, size_t at, uint32_t count, size_t entry_bytes)
{
    return count <= (in.size() - at) / entry_bytes;
}

bool decode_index(const std::string& in, uint64_t file_bytes, std::map<int, LayerTransforms>& layers)
{
    size_t at = 0;
    uint32_t count = 0;
    if (!get(in, at, count))
        return false;
    for (uint32_t i = 0; i < count; i++)
    {
        int32_t layer = 0;
        uint32_t mats = 0, skipped = 0;
        if (!get(in, at, layer) || !get(in, at, mats) || !fits(in, at, mats, kMatEntryBytes))
            return false;
        LayerTransforms& t = layers[layer];
        t.mats.resize(mats);
        for (TransformedMat& m : t.mats)
        {
            int32_t v[6];
            for (int32_t& x : v)
                if (!get(in, at, x))
                    return false;
            m.dims = v[0], m.w = v[1], m.h = v[2], m.d = v[3], m.c = v[4], m.elempack = v[5];
            if (!get(in, at, m.elemsize) || !get(in, at, m.offset) || !get(in, at, m.bytes))
                return false;
            if (m.offset % kAlignment != 0 || m.bytes > file_bytes || m.offset > file_bytes - m.bytes)
                return false;
        }
        if (!get(in, at, skipped) || !fits(in, at, skipped, kSkippedEntryBytes))
            return false;
        t.skipped.resize(skipped);
        for (SkippedLoad& k : t.skipped)
            if (!get(in, at, k.call) || !get(in, at, k.end) || !get(in, at, k.elemsize) || !get(in, at, k.bytes))
                return false;
    }
    return at == in.size();
}

uint64_t largest_skipped_of(const std::map<int, LayerTransforms>& layers)
{
    uint64_t largest = 0;
    for (const auto& kv : layers)
        for (const SkippedLoad& k : kv.second.skipped)
            largest = std::max(largest, k.bytes);
    return largest;
}

} // namespace

TransformKey TransformKey::current(const RuntimeOptions& options)
{
    const BuildInfo build = build_info();
    TransformKey key;
    key.fields = {
        {"ncnn_version", build.ncnn_version},
        {"patch_series_id", build.patch_series_id},
        {"isa", build.isa},
        {"cpu_features", cpu_features()},
        {"l2_bytes", std::to_string(ncnn::get_cpu_level2_cache_size())},
        {"threads", std::to_string(options.num_threads)},
        {"packing", options.use_packing_layout ? "1" : "0"},
        {"winograd", options.use_winograd ? "1" : "0"},
        {"sgemm", options.use_sgemm ? "1" : "0"},
        {"fp16", options.use_fp16 ? "1" : "0"},
    };
    return key;
}

std::string TransformKey::text() const
{
    std::string s;
    for (const auto& f : fields)
        s += f.first + "=" + f.second + "\n";
    return s;
}

Status TransformKey::parse(const std::string& text, TransformKey& key)
{
    key.fields.clear();
    for (size_t start = 0, end = 0; start < text.size(); start = end + 1)
    {
        end = text.find('\n', start);
        if (end == std::string::npos)
            end = text.size();
        const std::string line = text.substr(start, end - start);
        const size_t eq = line.find('=');
        if (eq == std::string::npos)
            return Status::error("malformed key line '" + line + "'");
        key.fields.emplace_back(line.substr(0, eq), line.substr(eq + 1));
    }
    return Status();
}

Status TransformKey::accepts(const TransformKey& made) const
{
    for (const auto& f : fields)
    {
        std::string theirs = "(none)";
        for (const auto& g : made.fields)
            if (g.first == f.first)
                theirs = g.second;
        if (theirs != f.second)
            return Status::error("made for " + f.first + "=" + theirs + ", this run has " + f.first + "=" + f.second);
    }
    return Status();
}

TransformedWeightsFile::~TransformedWeightsFile()
{
    if (fd_ >= 0)
        close(fd_);
}

Status TransformedWeightsFile::open(const std::string& path, const TransformKey& expected, bool direct)
{
    const std::string what = "transformed weights " + path;
    // the header and index are read through a plain descriptor; records through `fd_`
    int plain = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (plain < 0)
        return Status::error("cannot open " + what + ": " + strerror(errno));
    const off_t file_bytes = lseek(plain, 0, SEEK_END);
    Header header;
    std::string key_text, index;
    Status s;
    if (file_bytes < (off_t)kHeaderBytes || pread_all(plain, &header, sizeof(header), 0) != sizeof(header)
        || memcmp(header.magic, kMagic, sizeof(kMagic)) != 0)
        s = Status::error(what + " is not a transformed-weights file (or was never finished)");
    else if (header.version != kVersion)
        s = Status::error(what + " has format version " + std::to_string(header.version) + ", this build reads "
                          + std::to_string(kVersion));
    else if (sizeof(header) + header.key_bytes > kHeaderBytes || header.index_offset + header.index_bytes != (uint64_t)file_bytes)
        s = Status::error(what + " is truncated or corrupt (its header does not match its size)");
    if (s.ok())
    {
        key_text.resize(header.key_bytes);
        index.resize(header.index_bytes);
        if (pread_all(plain, &key_text[0], key_text.size(), sizeof(header)) != key_text.size()
            || pread_all(plain, &index[0], index.size(), header.index_offset) != index.size())
            s = Status::error("cannot read " + what);
    }
    close(plain);
    if (!s.ok())
        return s;
    TransformKey made;
    s = TransformKey::parse(key_text, made);
    if (!s.ok())
        return Status::error(what + ": " + s.message());
    s = expected.accepts(made);
    if (!s.ok())
        return Status::error(what + " were " + s.message() + ": prepare the model again here");
    if (!decode_index(index, header.index_offset, layers_))
        return Status::error(what + " has a corrupt index");
    s = open_for_reading(path, what, direct, fd_);
    if (!s.ok())
        return s;
    path_ = path;
    return Status();
}

const LayerTransforms* TransformedWeightsFile::layer(int layer_index) const
{
    auto it = layers_.find(layer_index);
    return it == layers_.end() ? nullptr : &it->second;
}

uint64_t TransformedWeightsFile::largest_skipped() const
{
    return largest_skipped_of(layers_);
}

void TransformedWeightsFile::drop_cached(int layer_index) const
{
    if (const LayerTransforms* t = layer(layer_index))
        for (const TransformedMat& m : t->mats)
            posix_fadvise(fd_, (off_t)m.offset, (off_t)m.bytes, POSIX_FADV_DONTNEED);
}

TransformedWeightsWriter::~TransformedWeightsWriter()
{
    if (fd_ >= 0)
        close(fd_);
    if (!finished_ && !scratch_.empty())
        unlink(scratch_.c_str());
}

Status TransformedWeightsWriter::create(const std::string& path, const TransformKey& key)
{
    key_text_ = key.text();
    if (sizeof(Header) + key_text_.size() > kHeaderBytes)
        return Status::error("transformed-weights key too long");
    // written beside `path` and renamed over it once finished: a reader (another run preparing the
    // same model) never sees a file in the making, and a failed prepare leaves the old one
    const std::string scratch = path + "." + std::to_string(getpid()) + ".tmp";
    fd_ = ::open(scratch.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0)
        return Status::error("cannot create " + scratch + ": " + strerror(errno));
    path_ = path;
    scratch_ = scratch;
    end_ = kHeaderBytes;
    return Status();
}

void TransformedWeightsWriter::begin_layer(int layer_index)
{
    layer_ = layer_index;
}

int TransformedWeightsWriter::load(ncnn::Mat&)
{
    return 0;
}

void TransformedWeightsWriter::store(const ncnn::Mat& weight)
{
    if (!status_.ok() || layer_ < 0 || weight.empty())
        return;
    TransformedMat m;
    m.dims = weight.dims, m.w = weight.w, m.h = weight.h, m.d = weight.d, m.c = weight.c;
    m.elemsize = (uint32_t)weight.elemsize;
    m.elempack = weight.elempack;
    m.bytes = (uint64_t)weight.total() * weight.elemsize;
    // a record equal to one written before is not written again: its entry points there (a
    // spatially tiled block repeats its layers, weights and all, once per tile)
    std::vector<uint64_t>& same_hash = written_[record_hash(weight.data, m.bytes)];
    for (uint64_t offset : same_hash)
        if (same_on_disk(fd_, offset, weight.data, m.bytes))
        {
            m.offset = offset;
            layers_[layer_].mats.push_back(m);
            return;
        }
    m.offset = end_;
    if (!pwrite_all(fd_, weight.data, m.bytes, m.offset))
    {
        status_ = Status::error("cannot write " + path_ + ": " + strerror(errno));
        return;
    }
    end_ = align_up(m.offset + m.bytes);
    same_hash.push_back(m.offset);
    layers_[layer_].mats.push_back(m);
}

const LayerTransforms* TransformedWeightsWriter::current() const
{
    auto it = layers_.find(layer_);
    return it == layers_.end() ? nullptr : &it->second;
}

void TransformedWeightsWriter::set_skipped(std::vector<SkippedLoad> skipped)
{
    auto it = layers_.find(layer_);
    if (it != layers_.end())
        it->second.skipped = std::move(skipped);
}

uint64_t TransformedWeightsWriter::largest_skipped() const
{
    return largest_skipped_of(layers_);
}

Status TransformedWeightsWriter::finish()
{
    if (!status_.ok())
        return status_;
    const std::string index = encode_index(layers_);
    Header header;
    memcpy(header.magic, kMagic, sizeof(kMagic));
    header.version = kVersion;
    header.key_bytes = (uint32_t)key_text_.size();
    header.index_offset = end_;
    header.index_bytes = index.size();
    std::string head((const char*)&header, sizeof(header));
    head += key_text_;
    // the header last, after the records and index are on disk: a file cut short before this point
    // is never taken for a finished one
    if (!pwrite_all(fd_, index.data(), index.size(), end_) || ftruncate(fd_, (off_t)(end_ + index.size())) != 0
        || fsync(fd_) != 0 || !pwrite_all(fd_, head.data(), head.size(), 0) || fsync(fd_) != 0
        || rename(scratch_.c_str(), path_.c_str()) != 0)
        return Status::error("cannot write " + path_ + ": " + strerror(errno));
    finished_ = true;
    return Status();
}

TransformedWeightsReader::TransformedWeightsReader(const TransformedSource& source, const LayerTransforms& layer,
                                                   const std::string& layer_name)
    : source_(source), layer_(layer), layer_name_(layer_name)
{
}

void TransformedWeightsReader::fail(const std::string& message)
{
    if (error_.empty())
        error_ = "layer " + layer_name_ + ": " + message;
}

int TransformedWeightsReader::load(ncnn::Mat& weight)
{
    if (!error_.empty())
        return 0;
    if (next_ >= layer_.mats.size())
    {
        fail("asks for transformed weight " + std::to_string(next_ + 1) + ", " + source_.path + " has "
             + std::to_string(layer_.mats.size()));
        return 0;
    }
    const TransformedMat& m = layer_.mats[next_++];
    if (source_.mapped)
    {
        std::string error;
        if (source_.mapped->point(m, weight, source_.read_threads, error))
            return 1;
        fail("transformed weight " + std::to_string(next_) + " of " + source_.path + ": " + error);
        return 0;
    }
    if (source_.recorder)
        source_.recorder->mark_transformed();
    if (m.dims == 1)
        weight.create(m.w, (size_t)m.elemsize, m.elempack);
    else if (m.dims == 2)
        weight.create(m.w, m.h, (size_t)m.elemsize, m.elempack);
    else if (m.dims == 3)
        weight.create(m.w, m.h, m.c, (size_t)m.elemsize, m.elempack);
    else
        weight.create(m.w, m.h, m.d, m.c, (size_t)m.elemsize, m.elempack);
    if (weight.empty() || (uint64_t)weight.total() * weight.elemsize != m.bytes)
    {
        fail("transformed weight " + std::to_string(next_) + " does not fit its recorded " + std::to_string(m.bytes) + " B");
        return 0;
    }
    std::string error;
    size_t done;
    if (source_.window)
    {
        source_.window->forget(); // it may hold another file's bytes
        done = source_.window->copy(source_.fd, source_.path, m.offset, weight.data, m.bytes, m.offset + m.bytes, error);
        source_.window->forget();
    }
    else
    {
        done = pread_all(source_.fd, weight.data, m.bytes, m.offset, source_.read_threads);
    }
    if (done != m.bytes)
    {
        fail(error.empty() ? source_.path + " ended at byte " + std::to_string(m.offset + done) + ", "
                                 + std::to_string(m.offset + m.bytes) + " expected"
                           : error);
        return 0;
    }
    return 1;
}

void TransformedWeightsReader::store(const ncnn::Mat&)
{
    fail("derived a transformed weight that " + source_.path + " does not have");
}

Status TransformedWeightsReader::finish() const
{
    if (!error_.empty())
        return Status::error(error_);
    if (next_ != layer_.mats.size())
        return Status::error("layer " + layer_name_ + " used " + std::to_string(next_) + " of its "
                             + std::to_string(layer_.mats.size()) + " transformed weights in " + source_.path);
    return Status();
}

ZeroPages::~ZeroPages()
{
    if (data_)
        munmap(data_, size_);
}

Status ZeroPages::map(uint64_t bytes)
{
    bytes = align_up(bytes) + kAlignment;
    if (bytes <= size_)
        return Status();
    if (data_)
        munmap(data_, size_);
    data_ = nullptr;
    size_ = 0;
    void* p = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return Status::error("cannot map " + std::to_string(bytes) + " B of zero pages: " + strerror(errno));
    data_ = p;
    size_ = bytes;
    return Status();
}

SkippingModelBin::SkippingModelBin(WeightReader& reader, const std::vector<SkippedLoad>& skipped, const ZeroPages& zeros)
    : reader_(reader), raw_(reader), skipped_(skipped), zeros_(zeros)
{
}

ncnn::Mat SkippingModelBin::load(int w, int type) const
{
    const int call = (int)call_++;
    if (next_skip_ < skipped_.size() && skipped_[next_skip_].call == call)
    {
        const SkippedLoad& k = skipped_[next_skip_++];
        if ((uint64_t)w * k.elemsize != k.bytes || k.bytes > zeros_.size())
            return ncnn::Mat(); // the layer asks for another shape than prepare saw: its load fails
        reader_.skip_to(k.end);
        return ncnn::Mat(w, const_cast<void*>(zeros_.data()), (size_t)k.elemsize);
    }
    return raw_.load(w, type);
}

Status load_layer(PlannedLayer& layer, WeightReader& reader, const ncnn::Option& opt, const LayerTransforms* transforms,
                  const TransformedSource& source)
{
    Status built, filled;
    if (transforms && source.zeros)
    {
        SkippingModelBin mb(reader, transforms->skipped, *source.zeros);
        TransformedWeightsReader store(source, *transforms, layer.name);
        built = layer.load(mb, opt, &store);
        filled = store.finish();
    }
    else
    {
        ncnn::ModelBinFromDataReader mb(reader);
        built = layer.load(mb, opt);
    }
    if (!reader.error().empty())
        return Status::error("layer " + layer.name + ": " + reader.error());
    if (!built.ok() && !filled.ok())
        return Status::error(built.message() + "; " + filled.message());
    return filled.ok() ? built : filled;
}

} // namespace flexnn
