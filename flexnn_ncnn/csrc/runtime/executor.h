#ifndef FLEXNN_EXECUTOR_H
#define FLEXNN_EXECUTOR_H

#include "planner/plan.h"
#include "planner/planner.h"
#include "planner/profile.h"
#include "runtime/arena_allocator.h"
#include "runtime/by_step.h"
#include "runtime/counting_allocator.h"
#include "runtime/direct_window.h"
#include "runtime/failure.h"
#include "runtime/fault_injector.h"
#include "runtime/layer_schedule.h"
#include "runtime/model.h"
#include "runtime/progress.h"
#include "runtime/runtime_options.h"
#include "runtime/status.h"
#include "runtime/step_clock.h"
#include "runtime/stock_run.h"
#include "runtime/transformed_weights.h"

#include <cpu.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace flexnn {

struct RunStats
{
    double latency_us = 0;
    double load_wait_us = 0;          // time computation waited for loading (when the computing thread
                                      // loads: the time it spent loading)
    double loader_cpu_us = 0;         // CPU time the loading thread used (user + system): taken from the
                                      // computing threads' cores when it shares them (0: none ran)
    uint64_t outside_peak_bytes = 0;  // most bytes held outside the arena at once during the run
    uint64_t outside_allocations = 0; // requests served outside the arena during the run
    int loaded_layers = 0;            // layers the loading thread built: the streamed ones, and the first
                                      // run after set_plan also the resident ones
    int built_layers = 0;             // layers whose NCNN objects exist after the run: the resident ones
                                      // (a streamed layer's go once it has computed, unless its records are mapped)
    uint64_t arena_weight_bytes = 0;  // weight bytes the loading thread was served in the arena
    uint64_t mapped_weight_bytes = 0; // transformed weight bytes it made resident in the mapped file instead
    uint64_t mapped_peak_bytes = 0;   // the most bytes of records mapped at once (their pages and over-read pages)
};

// Unmaps an arena: its own anonymous mapping of `bytes`, never a chunk of the C heap (the heap would
// serve it from free space it keeps, and keep its pages once it is freed).
struct ArenaUnmap
{
    uint64_t bytes = 0;
    void operator()(unsigned char* arena) const;
};

// Runs a prepared model under a plan (paper section 3.4). One arena of the plan's size holds every
// weight, activation and intermediate at its planned offset. A loading thread walks the steps in
// order: load(s) rebuilds step s's layer from its bytes of the .bin (and its pre-transformed weights,
// when prepare made them) once comp(i) has finished for its dependency (i, s); the calling thread
// computes through NCNN's Extractor, each layer waiting for its own load. Layers whose weights are
// pinned, or who have none, are built once per plan, by the first run after set_plan (so a budget
// switch costs planning and an allocation; the run after it loads what the new plan pins).
// run and set_plan may be called from any thread; they take turns.
class Executor : private ComputeHooks
{
public:
    ~Executor() override;

    // transformed_path: the pre-transformed weights prepare wrote for this profile ("" when it made
    // none); a file made for another build, CPU or options is refused
    static Status create(const std::string& param_path, const std::string& bin_path, const std::string& transformed_path,
                         const RuntimeOptions& options, LayerSchedule schedule, Profile profile,
                         std::unique_ptr<Executor>& out);

    // Check `plan` against the profile, then (between inferences) move to a fresh arena of its size
    // (with options.static_arena; without, buffers come from the heap as the plan's steps need them).
    Status set_plan(const Plan& plan);
    // Re-plan the stored profile for `budget` bytes of arena and move to it.
    Status set_budget(uint64_t budget, const PlannerOptions& options);

    // One inference: inputs in schedule().inputs order, outputs in schedule().outputs order. Whatever
    // fails or throws ends it in an error; the executor runs its plan again next time.
    Status run(const NamedMats& inputs, NamedMats& outputs, RunStats& stats);
    // Called for each output in schedule().outputs order while it is still in the arena, which the
    // next inference overwrites: it copies what the caller keeps (an error ends the inference)
    using OutputTaker = std::function<Status(const std::string& name, const ncnn::Mat& output)>;
    // The same inference, each output handed to `take` instead of cloned: a caller that converts
    // outputs (Python's dense arrays) makes its one copy from the arena
    Status run(const NamedMats& inputs, const OutputTaker& take, RunStats& stats);

    // Tests only: inject `faults` into the next runs and plan changes (an empty FaultPlan: none).
    void inject_faults(const FaultPlan& faults);
    // the requests the arena allocators served on their owner threads in the last run
    int last_run_requests() const
    {
        return faults_.requests();
    }

    // the current plan (a copy: set_plan may replace it meanwhile)
    Plan plan() const;
    // the profile every plan is checked against, as given to create (it never changes)
    const Profile& profile() const
    {
        return profile_;
    }
    const LayerSchedule& schedule() const
    {
        return schedule_;
    }
    // bytes the arena holds: the plan's arena plus NCNN's over-read margin past its last buffer (0
    // without a static arena)
    uint64_t arena_bytes() const;
    // bytes held outside the arena for the executor's whole life (the O_DIRECT window): counted in
    // every run's outside-arena peak, so a budget must leave room for them beside the arena
    uint64_t reserved_outside_bytes() const
    {
        return window_.allocated_bytes();
    }

private:
    Executor(const RuntimeOptions& options, LayerSchedule schedule, Profile profile);

    int before_compute(int layer_index) override;
    int after_compute(int layer_index, int ret) override;
    int raised(int layer_index, const std::string& what) override;


    // the loading thread's cores for options_.loader_cores
    Status choose_loader_cpus();
    Status load_step(int step);
    // load `step` unless it is resident and built, then mark it loaded; false when the inference has failed
    bool load_if_needed(int step);
    // options_.loader_cores == Computing: the computing thread loads every step up to `step` not
    // loaded yet, just before computing it (before_compute), without a loading thread; false when
    // a load failed (the inference's failure says why)
    bool load_through(int step);
    bool computing_loads() const
    {
        return options_.loader_cores == LoaderCores::Computing;
    }
    // how many threads share each large read: the computing ones when they load
    int read_threads() const
    {
        return computing_loads() ? options_.num_threads : 1;
    }
    // unload every layer, then free the arena (a run needs a plan again)
    void release_arena();
    // the loading thread's body: load_steps, whatever it throws turned into the inference's failure
    void load_all();
    void load_steps();
    // after a run that stopped early (the loading thread joined): the records of layers it loaded
    // but did not compute are given back, so the next run starts with only resident layers' mapped
    // (a run that completes gives each streamed layer's back as it computes)
    void give_back_uncomputed();
    Status set_plan_locked(const Plan& plan);
    Status run_locked(const NamedMats& inputs, const OutputTaker& take, RunStats& stats);

    // The loading thread of one run (none unless `started`), joined when it goes out of scope (an
    // exception on the computing thread included): whatever the loading thread still waits for is
    // stopped first.
    class LoadingThread
    {
    public:
        LoadingThread(Executor& e, bool started)
            : e_(e)
        {
            if (started)
                thread_ = std::thread(&Executor::load_all, &e);
        }
        ~LoadingThread()
        {
            join();
        }
        void join()
        {
            if (!thread_.joinable())
                return;
            e_.progress_.stop();
            thread_.join();
        }

    private:
        Executor& e_;
        std::thread thread_;
    };
    int layer_at(int step) const
    {
        return schedule_.order[step - 1];
    }

    const RuntimeOptions options_;
    const LayerSchedule schedule_;
    const Profile profile_;
    Plan plan_;
    StepNamer step_name_; // "step 3 (layer conv1)", for messages
    std::vector<uint64_t> input_bytes_; // per input: the bytes NCNN reads in place, or its copy into the arena was planned with
    bool has_plan_ = false;
    std::vector<bool> resident_;    // per step: built once per plan, by the first run's loading thread
    std::vector<bool> built_;       // per step: resident and built (loading thread during a run)
    std::vector<int> wait_for_;     // per step: the computation its load waits for, -1 none
    // per step: whether its layer's transformed records are mapped over their arena bytes, and the
    // pages of them to give back to the arena once it has computed (planner/record_pages.h)
    std::vector<bool> maps_;
    ByStep<std::pair<uint64_t, uint64_t> > give_back_;
    uint64_t mapped_weight_bytes_ = 0; // loading thread only
    // per step: its weights' (offset, planned bytes) in the arena; with canaries, poisoned once a streamed
    // layer has computed, kept at the start of a run once a resident one is built
    ByStep<std::pair<uint64_t, uint64_t> > weight_ranges_;
    bool pin_loader_ = false;       // whether the loading thread runs on loader_cpus_ only
    ncnn::CpuSet loader_cpus_;
    ncnn::Option load_opt_;
    std::mutex turn_;          // one run or plan change at a time
    mutable std::mutex state_; // plan_ and arena_ against readers from other threads (plan(), arena_bytes())

    // shared by both threads during an inference
    Failure failure_;
    Progress progress_;
    CountingAllocator outside_;
    FaultInjector faults_;    // none unless a test injects them
    StepClock load_clock_;    // the loading thread's
    StepClock compute_clock_; // the computing thread's
    double load_wait_us_ = 0; // computing thread only
    double loader_cpu_us_ = 0; // the loading thread's, written as it ends (read after the join)
    int loaded_layers_ = 0;   // loading thread only (the computing one when it loads)
    int next_load_ = 1;       // computing loads: the next step load_through loads
    ArenaCanary canary_; // armed with options_.canaries and a static arena
    ArenaAllocator weights_;
    ArenaAllocator blobs_;
    ArenaAllocator workspace_;
    MappedWeights mapped_; // options_.map_weights: the transformed file, mapped
    DirectWindow window_; // O_DIRECT reads only; allocated from outside_
    TransformedWeightsFile transformed_; // not open: every layer transforms its raw weights
    ZeroPages zeros_;                    // what the skipped raw weights point at
    TransformedSource source_;           // transformed_, the window with direct_io, zeros_, mapped_

    // declared last, destroyed first: layers release their Mats into the allocators above
    std::unique_ptr<unsigned char, ArenaUnmap> arena_;
    std::unique_ptr<Model> model_;
};

} // namespace flexnn

#endif // FLEXNN_EXECUTOR_H
