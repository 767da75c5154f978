#include "runtime/build_info.h"

#include <cpu.h>

namespace flexnn {

BuildInfo build_info()
{
    BuildInfo info;
    info.ncnn_version = FLEXNN_NCNN_VERSION;
    info.patch_series_id = FLEXNN_PATCH_SERIES_ID;
    info.target = FLEXNN_TARGET;
#if defined(__aarch64__)
    info.isa = "aarch64";
#elif defined(__x86_64__)
    info.isa = "x86_64";
#elif defined(__arm__)
    info.isa = "arm";
#else
    info.isa = "unknown";
#endif
    return info;
}

std::string cpu_features()
{
    std::string s;
    auto add = [&s](bool has, const char* name) {
        if (has)
            s += (s.empty() ? "" : ",") + std::string(name);
    };
    add(ncnn::cpu_support_x86_avx(), "avx");
    add(ncnn::cpu_support_x86_fma(), "fma");
    add(ncnn::cpu_support_x86_f16c(), "f16c");
    add(ncnn::cpu_support_x86_avx2(), "avx2");
    add(ncnn::cpu_support_x86_avx_vnni(), "avx_vnni");
    add(ncnn::cpu_support_x86_avx512(), "avx512");
    add(ncnn::cpu_support_x86_avx512_vnni(), "avx512_vnni");
    add(ncnn::cpu_support_x86_avx512_bf16(), "avx512_bf16");
    add(ncnn::cpu_support_x86_avx512_fp16(), "avx512_fp16");
    add(ncnn::cpu_support_arm_vfpv4(), "vfpv4");
    add(ncnn::cpu_support_arm_asimdhp(), "asimdhp");
    add(ncnn::cpu_support_arm_asimddp(), "asimddp");
    add(ncnn::cpu_support_arm_asimdfhm(), "asimdfhm");
    add(ncnn::cpu_support_arm_bf16(), "bf16");
    add(ncnn::cpu_support_arm_i8mm(), "i8mm");
    add(ncnn::cpu_support_arm_sve(), "sve");
    return s.empty() ? "none" : s;
}

} // namespace flexnn
