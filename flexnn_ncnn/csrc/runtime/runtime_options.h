#ifndef FLEXNN_RUNTIME_OPTIONS_H
#define FLEXNN_RUNTIME_OPTIONS_H

#include <option.h>

#include <cstdint>
#include <string>
#include <utility>

namespace flexnn {

// Which cores the loading thread may run on: NCNN's CpuSet masks for little and big, the clusters
// of cpu_clusters.h for middle; "any" leaves it unpinned. Computing: no loading thread; the
// computing thread loads each step just before computing it, its reads split among the computing
// threads (a machine whose every core computes: no thread takes a core from them mid-layer).
enum class LoaderCores
{
    Any = 0,
    Little = 1,
    Big = 2,
    Middle = 3,
    Computing = 4,
};

// "any", "little", "middle", "big" or "computing" into `out`; false for any other name
inline bool loader_cores_from_name(const std::string& name, LoaderCores& out)
{
    static const std::pair<const char*, LoaderCores> names[] = {{"any", LoaderCores::Any}, {"little", LoaderCores::Little},
        {"middle", LoaderCores::Middle}, {"big", LoaderCores::Big}, {"computing", LoaderCores::Computing}};
    for (const auto& n : names)
        if (name == n.first)
        {
            out = n.second;
            return true;
        }
    return false;
}

// What a model is prepared and run with. Everything that changes the layers' transformed weights
// or their buffers (threads, packing, kernels) must be the same for prepare and for every run of
// its plan: the plan file records it and the session refuses a mismatch.
struct RuntimeOptions
{
    int num_threads = 1;
    bool use_packing_layout = true;
    bool use_winograd = true;
    bool use_sgemm = true;
    bool use_fp16 = true; // NCNN's default: fp16 storage/arithmetic where the CPU has it
    LoaderCores loader_cores = LoaderCores::Any;
    bool drop_page_cache = false; // posix_fadvise(DONTNEED) each layer's bytes after loading them
    // read the .bin with O_DIRECT through an aligned window of at most DirectWindow::kMaxBytes, held
    // outside the arena for the executor's life (Executor::reserved_outside_bytes)
    bool direct_io = false;
    // map the pre-transformed weights file instead of reading it into the arena (zero copy): the
    // layers with transformed weights point at their records, which the loading thread makes
    // resident ahead of their computation and drops after it; the plan must be made for it
    // (PlannerOptions::map_transformed). Needs pre-transformed weights; not with direct_io.
    bool map_weights = false;
    // false: load(s) also waits for comp(s - 1), so loading never overlaps computing (the On-Demand
    // baseline, paper section 5.1, when run with the tightest plan)
    bool overlap_loading = true;
    // false (the ablation w.o.mem, paper section 5.5): no arena; each planned buffer is a heap block
    // (NCNN's fastMalloc) allocated when requested and freed when released, and a streamed layer's
    // weights are freed once it has computed. The plan still orders loads after computations, so
    // what is live at once is what the plan has live; all of it is counted outside the arena.
    bool static_arena = true;
    // bytes a plan leaves for requests served outside the arena (OpenMP workers inside a layer: the
    // sidecar's outside_bytes, which prepare measured); a run holding more there, beside the
    // executor's own (the O_DIRECT window) and, without the static arena, the plan's buffers, fails
    // naming the layer. UINT64_MAX: not bounded (prepare, which measures it).
    uint64_t outside_allowance = UINT64_MAX;
    // a debug check of the plan's lifetimes inside the arena, where no sanitizer sees: every byte no
    // live tensor holds is poisoned, and a request finding its slot written since fails the inference
    // naming the step (arena_canary.h). On in the sanitizer runs.
    bool canaries = false;

    ncnn::Option ncnn_option() const
    {
        ncnn::Option opt;
        opt.lightmode = true;
        opt.num_threads = num_threads;
        opt.use_packing_layout = use_packing_layout;
        opt.use_winograd_convolution = use_winograd;
        opt.use_sgemm_convolution = use_sgemm;
        if (!use_fp16)
        {
            opt.use_fp16_storage = false;
            opt.use_fp16_packed = false;
            opt.use_fp16_arithmetic = false;
        }
        opt.use_local_pool_allocator = false;
        opt.use_vulkan_compute = false;
        return opt;
    }
};

} // namespace flexnn

#endif // FLEXNN_RUNTIME_OPTIONS_H
