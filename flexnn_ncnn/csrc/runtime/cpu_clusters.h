#ifndef FLEXNN_CPU_CLUSTERS_H
#define FLEXNN_CPU_CLUSTERS_H

#include "runtime/status.h"

#include <string>
#include <vector>

namespace flexnn {

// Linux's per-core sysfs folder (cpuN/cpufreq/cpuinfo_max_freq inside)
constexpr const char* kSysfsCpuRoot = "/sys/devices/system/cpu";

// The cores under `sysfs_cpu_root` (its cpuN folders) grouped by their maximum frequency
// (cpufreq's cpuinfo_max_freq), slowest cluster first, each cluster's cores ascending. Empty when
// the root or any core's frequency cannot be read (no cpufreq: nothing to tell cores apart by); a
// frequency file that is not a number is an error naming it.
Status cpu_clusters(const std::string& sysfs_cpu_root, std::vector<std::vector<int> >& clusters);

// The "middle" cores (NCNN's CpuSet knows only little and big): with three or more clusters, every
// core in neither the slowest nor the fastest; with two, the slower (little) one; with one or none,
// empty, meaning any core.
Status middle_cpus(const std::string& sysfs_cpu_root, std::vector<int>& cpus);

} // namespace flexnn

#endif // FLEXNN_CPU_CLUSTERS_H
