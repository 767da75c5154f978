// libflexnn_code_trace: which pages of a code range a process executes, page by page.
//
// The kernel maps the 64 KB around each first call into a library's code (fault-around), so a
// process's resident code tells where its functions lie, not which ones run. code_trace_start()
// takes execute permission from the whole range; the first instruction fetched from a page then
// faults once, the handler marks the page and gives it back. Used by `python -m flexnn_ncnn.code_trace`
// in a process of its own: the handler stays installed until that process ends.
#include <signal.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace {

constexpr uintptr_t kPage = 4096;

// The one range traced in this process; written before the handler is installed, read by it only.
struct TracedRange
{
    uintptr_t begin = 0;
    uintptr_t end = 0;
    unsigned char* touched = nullptr;  // one byte per page, set to 1 once the page ran
    struct sigaction previous = {};
};

TracedRange g_range;

void on_fault(int signal, siginfo_t* info, void* context)
{
    const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
    if (address >= g_range.begin && address < g_range.end)
    {
        const uintptr_t page = address & ~(kPage - 1);
        g_range.touched[(page - g_range.begin) / kPage] = 1;
        if (mprotect(reinterpret_cast<void*>(page), kPage, PROT_READ | PROT_EXEC) == 0)
            return;
    }
    // not ours (or the page cannot be given back): the fault is what it would have been untraced
    sigaction(signal, &g_range.previous, nullptr);
    (void)context;
}

}  // namespace

extern "C" {

// Trace [begin, end) (page aligned): `touched` holds (end - begin) / 4096 bytes, zeroed, and lives
// as long as the process. Returns 0, or an errno.
int code_trace_start(uintptr_t begin, uintptr_t end, unsigned char* touched)
{
    if (g_range.touched != nullptr)
        return EBUSY;
    if (begin % kPage != 0 || end % kPage != 0 || end <= begin || touched == nullptr)
        return EINVAL;
    g_range.begin = begin;
    g_range.end = end;
    g_range.touched = touched;
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGSEGV, &action, &g_range.previous) != 0)
        return errno;
    if (mprotect(reinterpret_cast<void*>(begin), end - begin, PROT_NONE) != 0)
        return errno;
    return 0;
}

}  // extern "C"
