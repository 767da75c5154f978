#include "runtime/cpu_clusters.h"

#include "runtime/text_file.h"

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>

namespace flexnn {

namespace {

// the N of a "cpuN" folder name, -1 for any other name (cpufreq, cpuidle, ...)
int cpu_index(const std::string& name)
{
    if (name.size() < 4 || name.compare(0, 3, "cpu") != 0)
        return -1;
    for (size_t i = 3; i < name.size(); i++)
        if (!std::isdigit((unsigned char)name[i]))
            return -1;
    return std::stoi(name.substr(3));
}

} // namespace

Status cpu_clusters(const std::string& sysfs_cpu_root, std::vector<std::vector<int> >& clusters)
{
    clusters.clear();
    std::vector<int> cpus;
    if (DIR* dir = opendir(sysfs_cpu_root.c_str()))
    {
        while (const dirent* entry = readdir(dir))
        {
            const int cpu = cpu_index(entry->d_name);
            if (cpu >= 0)
                cpus.push_back(cpu);
        }
        closedir(dir);
    }
    std::map<unsigned long long, std::vector<int> > by_frequency; // ascending frequency
    std::sort(cpus.begin(), cpus.end());
    for (int cpu : cpus)
    {
        const std::string path = sysfs_cpu_root + "/cpu" + std::to_string(cpu) + "/cpufreq/cpuinfo_max_freq";
        std::string text;
        if (!read_text_file(path, text).ok())
            return Status(); // one unreadable core: the clusters cannot be told apart
        char* end = nullptr;
        const unsigned long long khz = strtoull(text.c_str(), &end, 10);
        if (end == text.c_str())
            return Status::error(path + " does not hold a frequency");
        by_frequency[khz].push_back(cpu);
    }
    for (auto& kv : by_frequency)
        clusters.push_back(std::move(kv.second));
    return Status();
}

Status middle_cpus(const std::string& sysfs_cpu_root, std::vector<int>& cpus)
{
    cpus.clear();
    std::vector<std::vector<int> > clusters;
    Status s = cpu_clusters(sysfs_cpu_root, clusters);
    if (!s.ok() || clusters.size() < 2)
        return s;
    const size_t first = clusters.size() == 2 ? 0 : 1, last = clusters.size() == 2 ? 1 : clusters.size() - 1;
    for (size_t c = first; c < last; c++)
        cpus.insert(cpus.end(), clusters[c].begin(), clusters[c].end());
    std::sort(cpus.begin(), cpus.end());
    return Status();
}

} // namespace flexnn
