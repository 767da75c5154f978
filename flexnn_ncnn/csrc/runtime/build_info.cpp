#include "runtime/build_info.h"

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

} // namespace flexnn
