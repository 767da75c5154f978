#ifndef FLEXNN_TRANSFORMED_WEIGHTS_H
#define FLEXNN_TRANSFORMED_WEIGHTS_H

#include "runtime/direct_window.h"
#include "runtime/mapped_weights.h"
#include "runtime/planned_layer.h"
#include "runtime/recording_allocator.h"
#include "runtime/runtime_options.h"
#include "runtime/status.h"
#include "runtime/weight_reader.h"

#include <layer.h>
#include <modelbin.h>

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace flexnn {

// Pre-transformed weights (paper section 3.4; ncnn_patches/0003): prepare records, for each layer,
// the weights its create_pipeline derives (Winograd, packed, GEMM-tiled) into one file beside the
// model; every later load fills those Mats from the file instead of transforming again.

// One transformed weight: the Mat's shape as the layer created it, and where its bytes are.
struct TransformedMat
{
    int dims = 0, w = 0, h = 0, d = 0, c = 0;
    uint32_t elemsize = 0;
    int elempack = 0;
    uint64_t offset = 0; // in the transformed file, a multiple of DirectWindow::kAlignment
    uint64_t bytes = 0;  // total() * elemsize, channel padding included
};

// A raw weight (a ModelBin::load call of the layer's load_model) that the layer releases once it has
// transformed it: with pre-transformed weights it is neither read from the .bin nor allocated (its
// Mat points at ZeroPages).
struct SkippedLoad
{
    int call = 0;       // which ModelBin::load call of the layer, from 0
    uint64_t end = 0;   // the .bin position after it
    uint32_t elemsize = 0;
    uint64_t bytes = 0; // w * elemsize of the load
};

struct LayerTransforms
{
    std::vector<TransformedMat> mats; // in the order create_pipeline asks for them
    std::vector<SkippedLoad> skipped; // by call
};

// Everything the transformed layouts depend on, as named fields: the build (NCNN version, patch
// series), the CPU (ISA, the features NCNN dispatches on, L2 size) and the options (threads,
// packing, kernels, fp16). A file made under another key is refused, naming the first differing field.
struct TransformKey
{
    std::vector<std::pair<std::string, std::string> > fields;

    static TransformKey current(const RuntimeOptions& options);
    std::string text() const; // "name=value\n" lines
    static Status parse(const std::string& text, TransformKey& key);
    // ok when `made` (a file's key) equals this one
    Status accepts(const TransformKey& made) const;
};

// The transformed-weights file: a header (magic, version, key), 4096-aligned records, an index.
class TransformedWeightsFile
{
public:
    TransformedWeightsFile() = default;
    ~TransformedWeightsFile();
    TransformedWeightsFile(const TransformedWeightsFile&) = delete;
    TransformedWeightsFile& operator=(const TransformedWeightsFile&) = delete;

    // Read the header and index; a key other than `expected` is an error naming the field.
    // direct: O_DIRECT (reads then go through a DirectWindow), never a silent fallback
    Status open(const std::string& path, const TransformKey& expected, bool direct);
    // null when the layer is built from its raw weights
    const LayerTransforms* layer(int layer_index) const;
    int fd() const
    {
        return fd_;
    }
    const std::string& path() const
    {
        return path_;
    }
    // tell the kernel the page cache need not keep this layer's transformed bytes
    void drop_cached(int layer_index) const;
    // the largest skipped raw weight of any layer
    uint64_t largest_skipped() const;

private:
    std::string path_;
    int fd_ = -1;
    std::map<int, LayerTransforms> layers_;
};

// Prepare's store: offers nothing (load returns 0) and appends every Mat a layer derives to the
// file being written. finish() writes the index and the header; until then the file is incomplete.
class TransformedWeightsWriter : public ncnn::TransformedWeightStore
{
public:
    TransformedWeightsWriter() = default;
    ~TransformedWeightsWriter() override;
    TransformedWeightsWriter(const TransformedWeightsWriter&) = delete;
    TransformedWeightsWriter& operator=(const TransformedWeightsWriter&) = delete;

    // the file appears at `path` when finish() succeeds, whole
    Status create(const std::string& path, const TransformKey& key);
    // the Mats stored from now on are this layer's
    void begin_layer(int layer_index);
    int load(ncnn::Mat& weight) override;
    void store(const ncnn::Mat& weight) override;
    // the current layer's Mats so far (null: none)
    const LayerTransforms* current() const;
    void set_skipped(std::vector<SkippedLoad> skipped);
    // the largest skipped raw weight so far
    uint64_t largest_skipped() const;
    // first write error, if any
    const Status& status() const
    {
        return status_;
    }
    int fd() const
    {
        return fd_;
    }
    Status finish();

private:
    std::string path_;
    std::string scratch_; // what is written, renamed to path_ by finish
    bool finished_ = false;
    std::string key_text_;
    int fd_ = -1;
    uint64_t end_ = 0; // where the next record goes
    int layer_ = -1;
    std::map<int, LayerTransforms> layers_;
    // the offsets of the records written, by record_hash of their bytes; equal records share one
    std::unordered_map<uint64_t, std::vector<uint64_t> > written_;
    Status status_;
};

struct TransformedSource;

// One load of one layer: fills the Mats its create_pipeline asks for, in order, from the file, into
// buffers the thread's default allocator gives (the arena), or points them into the mapped file
// (source.mapped). A request the file does not have, a shape other than recorded, a short read or a
// Mat the layer derived itself is an error (finish()).
class TransformedWeightsReader : public ncnn::TransformedWeightStore
{
public:
    TransformedWeightsReader(const TransformedSource& source, const LayerTransforms& layer, const std::string& layer_name);
    int load(ncnn::Mat& weight) override;
    void store(const ncnn::Mat& weight) override;
    Status finish() const;

private:
    void fail(const std::string& message);

    const TransformedSource& source_;
    const LayerTransforms& layer_;
    const std::string& layer_name_;
    size_t next_ = 0;
    std::string error_;
};

// While alive, this thread's create_pipeline calls go to `store` (ncnn_patches/0003); scopes nest.
class TransformedStoreScope
{
public:
    explicit TransformedStoreScope(ncnn::TransformedWeightStore* store)
        : previous_(ncnn::set_thread_transformed_weight_store(store))
    {
    }
    ~TransformedStoreScope()
    {
        ncnn::set_thread_transformed_weight_store(previous_);
    }
    TransformedStoreScope(const TransformedStoreScope&) = delete;
    TransformedStoreScope& operator=(const TransformedStoreScope&) = delete;

private:
    ncnn::TransformedWeightStore* previous_;
};

// A read-only anonymous mapping: zeros that occupy no memory (no page is ever written). A skipped raw
// weight's Mat points here, so the layer that releases it unread costs neither I/O nor arena.
class ZeroPages
{
public:
    ZeroPages() = default;
    ~ZeroPages();
    ZeroPages(const ZeroPages&) = delete;
    ZeroPages& operator=(const ZeroPages&) = delete;

    // at least `bytes` (and a page more: a Mat's channel step may round its size up)
    Status map(uint64_t bytes);
    const void* data() const
    {
        return data_;
    }
    uint64_t size() const
    {
        return size_;
    }

private:
    void* data_ = nullptr;
    uint64_t size_ = 0;
};

// NCNN's ModelBin over a WeightReader, except that the skipped calls return a Mat over `zeros`
// (no allocation) and move past their bytes without reading them.
class SkippingModelBin : public ncnn::ModelBin
{
public:
    SkippingModelBin(WeightReader& reader, const std::vector<SkippedLoad>& skipped, const ZeroPages& zeros);
    ncnn::Mat load(int w, int type) const override;

private:
    WeightReader& reader_;
    const ncnn::ModelBinFromDataReader raw_;
    const std::vector<SkippedLoad>& skipped_;
    const ZeroPages& zeros_;
    mutable size_t call_ = 0;
    mutable size_t next_skip_ = 0;
};

// Where layers' pre-transformed weights are read from.
struct TransformedSource
{
    int fd = -1;
    std::string path;
    DirectWindow* window = nullptr; // O_DIRECT reads; null: pread
    const ZeroPages* zeros = nullptr;
    RecordingAllocator* recorder = nullptr; // prepare: marks each transformed Mat's request
    MappedWeights* mapped = nullptr;        // records mapped over their arena bytes instead of read there
    int read_threads = 1;                   // how many share each large pread (pread_all)
};

// Build `layer` from `reader` (its bytes of the .bin) and, when `transforms` is not null, its
// transformed weights from `source`. Read errors name the file and position rather than NCNN's
// failed step.
Status load_layer(PlannedLayer& layer, WeightReader& reader, const ncnn::Option& opt, const LayerTransforms* transforms,
                  const TransformedSource& source);

} // namespace flexnn

#endif // FLEXNN_TRANSFORMED_WEIGHTS_H
