#ifndef FLEXNN_BUILD_INFO_H
#define FLEXNN_BUILD_INFO_H

#include <string>

namespace flexnn {

// What this binary was built from: plans and pre-transformed weights are keyed by these.
struct BuildInfo
{
    std::string ncnn_version;    // date version of the pinned NCNN source, e.g. "20261020"
    std::string patch_series_id; // patches::series_id of ncnn_patches/series
    std::string target;          // host, linux-aarch64 or android-arm64
    std::string isa;             // x86_64, aarch64, ...
};

BuildInfo build_info();

// The ISA extensions of this CPU that NCNN dispatches kernels and layouts on, comma-separated
// ("none" without any): profiles and transformed weights are keyed by them.
std::string cpu_features();

} // namespace flexnn

#endif // FLEXNN_BUILD_INFO_H
