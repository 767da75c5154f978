#ifndef FLEXNN_HEAP_POLICY_H
#define FLEXNN_HEAP_POLICY_H

namespace flexnn {

// glibc's malloc raises its mmap threshold (up to 32 MiB) each time a mapped block is freed; blocks
// under the raised threshold then come from the brk heap, whose freed pages stay resident and
// fragment. How far it was raised depends on everything the process freed before, so the resident
// memory a model adds would too. Fixing the thresholds at glibc's defaults keeps every large block
// mapped and unmapped on free: a model's peak RSS over idle is then the same in the process prepare
// measures it in and in every process that runs its plan. One malloc arena for all threads, for the
// same reason: which thread allocates does not decide where the bytes go. No-op without glibc.
// The Python module calls it when it is imported and flexnn-bench first thing, before anything
// they measure allocates; Model::open calls it for every other program the runtime is linked into.
void fix_malloc_thresholds();

} // namespace flexnn

#endif // FLEXNN_HEAP_POLICY_H
