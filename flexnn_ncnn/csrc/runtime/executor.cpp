#include "runtime/executor.h"

#include "planner/check_plan.h"
#include "planner/record_pages.h"
#include "runtime/cpu_clusters.h"
#include "runtime/read_only_input.h"
#include "runtime/request_probe.h"
#include "runtime/thread_allocator_scope.h"
#include "runtime/weight_reader.h"

#include <allocator.h>
#include <cpu.h>

#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

namespace flexnn {

namespace {

double now_us()
{
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// page-aligned, so a record mapped at a page-aligned offset has its pages to itself; NCNN may read
// NCNN_MALLOC_OVERREAD past it, and a page no access is allowed to follows (an overrun faults)
std::unique_ptr<unsigned char, ArenaUnmap> allocate_arena(uint64_t bytes)
{
    const uint64_t usable = align_up(bytes + NCNN_MALLOC_OVERREAD, kMappedPage);
    void* p = mmap(nullptr, usable + kMappedPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return nullptr;
    std::unique_ptr<unsigned char, ArenaUnmap> arena(static_cast<unsigned char*>(p), ArenaUnmap{usable + kMappedPage});
    if (mprotect(arena.get() + usable, kMappedPage, PROT_NONE) != 0)
        return nullptr;
    return arena;
}

} // namespace

void ArenaUnmap::operator()(unsigned char* arena) const
{
    munmap(arena, bytes);
}

Executor::Executor(const RuntimeOptions& options, LayerSchedule schedule, Profile profile)
    : options_(options), schedule_(std::move(schedule)), profile_(std::move(profile)),
      weights_(Role::Weight, load_clock_, failure_, outside_, faults_),
      blobs_(Role::Activation, compute_clock_, failure_, outside_, faults_),
      workspace_(Role::Intermediate, compute_clock_, failure_, outside_, faults_), mapped_(weights_),
      arena_(nullptr)
{
}

Executor::~Executor()
{
    // no record stays mapped over the arena: the layers' Mats write their refcounts into it as the
    // model goes (before the arena and the allocators), and it is freed only then; if a record
    // cannot be given back, the arena is kept
    const bool restored = mapped_.restore_all(arena_.get(), plan_.arena_bytes).ok();
    model_.reset();
    if (!restored)
        arena_.release();
}

Status Executor::create(const std::string& param_path, const std::string& bin_path, const std::string& transformed_path,
                        const RuntimeOptions& options, LayerSchedule schedule, Profile profile,
                        std::unique_ptr<Executor>& out)
{
    Status s = validate_profile(profile);
    if (!s.ok())
        return s;
    if ((int)profile.layers.size() != schedule.step_count())
        return Status::error("profile has " + std::to_string(profile.layers.size()) + " steps, the schedule "
                             + std::to_string(schedule.step_count()));
    std::unique_ptr<Executor> e(new Executor(options, std::move(schedule), std::move(profile)));
    e->model_.reset(new Model);
    s = e->model_->open(param_path, bin_path, options.ncnn_option(), e.get(), options.direct_io);
    if (!s.ok())
        return s;
    s = e->choose_loader_cpus();
    if (!s.ok())
        return s;
    if (options.map_weights && (transformed_path.empty() || options.direct_io || !options.static_arena))
        return Status::error(transformed_path.empty() ? "mapped weights need the pre-transformed weights file: prepare the model with it"
                             : options.direct_io      ? "mapped weights are not read with O_DIRECT: choose one"
                                                      : "mapped weights are mapped over the arena: they need the static arena");
    if (!transformed_path.empty())
    {
        s = e->transformed_.open(transformed_path, TransformKey::current(options), options.direct_io);
        if (!s.ok())
            return s;
        s = e->zeros_.map(e->transformed_.largest_skipped());
        if (!s.ok())
            return s;
        if (options.map_weights)
        {
            s = e->mapped_.open(e->transformed_.fd(), transformed_path);
            if (!s.ok())
                return s;
        }
        e->source_ = {e->transformed_.fd(), e->transformed_.path(), options.direct_io ? &e->window_ : nullptr, &e->zeros_, nullptr,
                      options.map_weights ? &e->mapped_ : nullptr, e->read_threads()};
    }
    if (options.direct_io)
    {
        uint64_t largest = 0;
        for (const ByteRange& r : e->schedule_.ranges)
            largest = std::max(largest, r.end - r.begin);
        s = e->window_.allocate(DirectWindow::size_for(largest), &e->outside_);
        if (!s.ok())
            return s;
    }
    s = e->schedule_.validate(*e->model_);
    if (!s.ok())
        return s;
    for (int layer = 0; layer < e->model_->layer_count(); layer++)
        if (PlannedLayer* planned = e->model_->planned(layer))
            planned->set_flags(e->schedule_.flags[layer]);
    e->step_name_ = [raw = e.get()](int step) { return raw->schedule_.step_name(step, *raw->model_); };
    e->input_bytes_.assign(e->schedule_.inputs.size(), 0);
    for (size_t k = 0; k < e->input_bytes_.size(); k++)
        e->input_bytes_[k] = e->schedule_.input_uses[k].bytes;
    // the copies into the arena are step 0's, in the order of the inputs not read in place
    std::vector<size_t> copied;
    for (size_t k = 0; k < e->input_bytes_.size(); k++)
        if (!e->schedule_.input_uses[k].in_place())
            copied.push_back(k);
    for (const TensorUse& t : e->profile_.tensors)
        if (t.layer == 0 && t.role == Role::Activation && t.ordinal >= 0 && t.ordinal < (int)copied.size())
            e->input_bytes_[copied[t.ordinal]] = t.size;
    e->load_opt_ = e->model_->options();
    e->load_opt_.blob_allocator = nullptr; // all a layer builds lands in the weights allocator
    e->load_opt_.workspace_allocator = nullptr;
    out = std::move(e);
    return Status();
}

Status Executor::choose_loader_cpus()
{
    pin_loader_ = options_.loader_cores != LoaderCores::Any && options_.loader_cores != LoaderCores::Computing;
    if (options_.loader_cores == LoaderCores::Little || options_.loader_cores == LoaderCores::Big)
        loader_cpus_ = ncnn::get_cpu_thread_affinity_mask(options_.loader_cores == LoaderCores::Little ? 1 : 2);
    if (options_.loader_cores != LoaderCores::Middle)
        return Status();
    std::vector<int> cpus;
    Status s = middle_cpus(kSysfsCpuRoot, cpus);
    if (!s.ok())
        return Status::error("middle cores: " + s.message());
    pin_loader_ = !cpus.empty(); // no middle cluster to tell: any core
    loader_cpus_.disable_all();
    for (int cpu : cpus)
        loader_cpus_.enable(cpu);
    return Status();
}

uint64_t Executor::arena_bytes() const
{
    std::lock_guard<std::mutex> state(state_);
    return arena_ ? plan_.arena_bytes + NCNN_MALLOC_OVERREAD : 0;
}

Plan Executor::plan() const
{
    std::lock_guard<std::mutex> state(state_);
    return plan_;
}

Status Executor::set_budget(uint64_t budget, const PlannerOptions& options)
{
    PlanResult result = make_plan(profile_, budget, options);
    if (!result.status.ok())
    {
        std::string message = result.status.message();
        if (result.min_feasible_budget)
            message += " (the smallest feasible budget is " + std::to_string(result.min_feasible_budget) + " B)";
        return Status::error(message);
    }
    return set_plan(result.plan);
}

Status Executor::set_plan(const Plan& plan)
{
    std::lock_guard<std::mutex> turn(turn_);
    return set_plan_locked(plan);
}

Status Executor::set_plan_locked(const Plan& plan)
{
    Status s = check_plan(profile_, plan);
    if (!s.ok())
        return Status::error("plan: " + s.message());
    if (plan.alignment == 0 || plan.alignment % NCNN_MALLOC_ALIGN != 0)
        return Status::error("plan: alignment " + std::to_string(plan.alignment) + " is not a multiple of NCNN's "
                             + std::to_string(NCNN_MALLOC_ALIGN));
    // transformed records are mapped over their arena bytes exactly when the plan says so
    if (has_transformed(profile_) && plan.mapped != options_.map_weights)
        return Status::error(plan.mapped ? "plan: it maps the transformed weights, this session reads them into the arena: open it with mapped weights"
                                         : "plan: it reads the transformed weights into the arena, this session maps them: plan with mapped weights");

    // where each (role, step, ordinal) goes; ordinals must be dense, as the allocators count them
    const int steps = schedule_.step_count();
    // with canaries every record page is given back, so the canary may poison any byte no tensor holds
    const std::vector<ByteRanges> pages = options_.canaries || !plan.mapped ? std::vector<ByteRanges>() : pages_to_give_back(profile_, plan);
    const auto given_back = [&](size_t k) {
        return plan.mapped && profile_.tensors[k].transformed && !plan.tensors[k].pinned;
    };
    std::vector<std::vector<uint32_t> > counts(3, std::vector<uint32_t>(steps, 0));
    std::vector<uint32_t> weight_count(steps, 0), give_back_count(steps, 0);
    for (size_t k = 0; k < profile_.tensors.size(); k++)
    {
        const TensorUse& t = profile_.tensors[k];
        counts[(int)t.role][t.layer] = std::max(counts[(int)t.role][t.layer], (uint32_t)t.ordinal + 1);
        weight_count[t.layer] += t.role == Role::Weight ? 1 : 0;
        give_back_count[t.layer] += given_back(k) ? (options_.canaries ? 1 : (uint32_t)pages[k].size()) : 0;
    }
    std::vector<PlannedBuffers> buffers;
    for (const std::vector<uint32_t>& role_counts : counts)
        buffers.emplace_back(role_counts);
    ByStep<std::pair<uint64_t, uint64_t> > weight_ranges(weight_count), give_back(give_back_count);
    std::vector<uint32_t> pinned_count(steps, 0), weights_set(steps, 0), given_back_set(steps, 0);
    std::vector<bool> maps(steps, false);
    for (size_t k = 0; k < profile_.tensors.size(); k++)
    {
        const TensorUse& t = profile_.tensors[k];
        buffers[(int)t.role].at(t.layer, t.ordinal) = {plan.tensors[k].offset, t.size};
        if (t.role != Role::Weight)
            continue;
        pinned_count[t.layer] += plan.tensors[k].pinned ? 1 : 0;
        const std::pair<uint64_t, uint64_t> placed{plan.tensors[k].offset, planned_bytes(t, plan.mapped, plan.alignment)};
        weight_ranges.at(t.layer, weights_set[t.layer]++) = placed;
        if (plan.mapped && t.transformed)
        {
            // given back by the computing thread once its layer has computed
            if (t.last_use != t.layer)
                return Status::error("profile: " + step_name_(t.layer) + " has a mapped weight used after its layer");
            maps[t.layer] = true;
        }
        if (given_back(k))
            for (const auto& range : options_.canaries ? ByteRanges{placed} : pages[k])
                give_back.at(t.layer, given_back_set[t.layer]++) = range;
    }
    for (int role = 0; role < 3; role++)
        for (int step = 0; step < steps; step++)
            for (int ordinal = 0; ordinal < buffers[role].count(step); ordinal++)
                if (buffers[role].at(step, ordinal).size == 0)
                    return Status::error("profile: " + step_name_(step) + " has a gap in its " + role_name((Role)role) + " ordinals");
    std::vector<bool> resident(steps, false);
    std::vector<int> wait_for(steps, -1);
    for (int step = 1; step < schedule_.output_step(); step++)
    {
        if (pinned_count[step] != 0 && pinned_count[step] != weight_count[step])
            return Status::error("plan: " + step_name_(step) + " has some weights pinned and some not");
        resident[step] = pinned_count[step] == weight_count[step];
    }
    for (const Dependency& d : plan.dependencies)
    {
        if (d.load >= schedule_.output_step())
            return Status::error("plan: a dependency loads step " + std::to_string(d.load) + ", past the last layer");
        wait_for[d.load] = std::max(wait_for[d.load], d.comp);
    }

    // between inferences: nothing is computing or loading. The old arena goes before the new one is
    // allocated (never both at once); when the new one cannot be had, the old plan is bound again.
    const bool had_plan = has_plan_;
    const Plan previous = plan_;
    release_arena();
    if (options_.static_arena)
    {
        std::unique_ptr<unsigned char, ArenaUnmap> arena = faults_.take_arena_failure() ? nullptr : allocate_arena(plan.arena_bytes);
        if (!arena)
        {
            const Status failed = Status::error("cannot allocate an arena of " + std::to_string(plan.arena_bytes) + " B");
            if (had_plan)
            {
                Status s = set_plan_locked(previous);
                if (!s.ok())
                    return Status::error(failed.message() + ", nor the current plan's again: " + s.message());
            }
            return Status::error(failed.message() + (had_plan ? ": the current plan stays" : ""));
        }
        std::lock_guard<std::mutex> state(state_);
        arena_ = std::move(arena);
    }
    {
        std::lock_guard<std::mutex> state(state_);
        plan_ = plan;
    }
    has_plan_ = true;
    resident_ = resident;
    built_.assign(steps, false); // resident layers are built by the next run's loading thread
    wait_for_ = wait_for;
    weight_ranges_ = std::move(weight_ranges);
    maps_ = std::move(maps);
    give_back_ = std::move(give_back);
    canary_.bind(options_.canaries ? arena_.get() : nullptr, plan.arena_bytes);
    ArenaCanary* canary = canary_.armed() ? &canary_ : nullptr;
    const uint64_t beside = reserved_outside_bytes() + (options_.static_arena ? 0 : plan.arena_bytes);
    const size_t outside_limit = options_.outside_allowance > SIZE_MAX - beside ? SIZE_MAX : (size_t)(options_.outside_allowance + beside);
    weights_.bind(arena_.get(), std::move(buffers[(int)Role::Weight]), &step_name_, outside_limit, canary);
    blobs_.bind(arena_.get(), std::move(buffers[(int)Role::Activation]), &step_name_, outside_limit, canary);
    workspace_.bind(arena_.get(), std::move(buffers[(int)Role::Intermediate]), &step_name_, outside_limit, canary);
    return Status();
}

void Executor::release_arena()
{
    // layers' Mats keep their refcounts inside the arena: drop them while it still exists, and no
    // record is mapped over it (a page left the file's after its record died is read-only)
    const bool restored = mapped_.restore_all(arena_.get(), plan_.arena_bytes).ok();
    for (int layer : schedule_.order)
        model_->planned(layer)->unload(load_opt_);
    built_.assign(built_.size(), false);
    has_plan_ = false;
    std::lock_guard<std::mutex> state(state_);
    // never freed with a record still mapped over it (malloc would write into its pages)
    if (!restored)
        arena_.release();
    arena_.reset();
}

Status Executor::load_step(int step)
{
    const int layer = layer_at(step);
    PlannedLayer* planned = model_->planned(layer);
    const ByteRange& range = schedule_.ranges[layer];
    WeightReader reader(model_->weights(), range, options_.direct_io ? &window_ : nullptr, read_threads());
    faults_.delay();
    if (canary_.armed())
    {
        // releasing the layer's weights of its last load writes their refcounts, inside the bytes
        // this load is about to take (the plan's dependencies have freed them): poison them again
        planned->unload(load_opt_);
        for (const auto& r : weight_ranges_.of(step))
            canary_.poison(r.first, r.second);
    }
    const LayerTransforms* transforms = transformed_.layer(layer);
    if (maps_[step])
    {
        // its records are mapped over their arena bytes as NCNN asks for them, resident before the
        // layer is built on them (read ahead here, not faulted in by its kernels)
        Status s = mapped_.begin_layer(layer);
        if (!s.ok())
            return s;
        for (size_t k = 0; transforms && k < transforms->mats.size(); k++)
            mapped_weight_bytes_ += transforms->mats[k].bytes;
    }
    load_clock_.begin(step);
    Status s;
    {
        ThreadAllocatorScope scope(&weights_);
        s = load_layer(*planned, reader, load_opt_, transforms, source_);
    }
    load_clock_.end();
    if (!s.ok())
        return s;
    if (failure_.failed())
        return failure_.status();
    if (reader.position() != range.end)
        return Status::error("layer " + planned->name + " read " + std::to_string(reader.position() - range.begin)
                             + " B of its " + std::to_string(range.end - range.begin) + " B in the .bin");
    if (planned->loaded_flags() != schedule_.flags[layer])
        return Status::error("layer " + planned->name + " was built with other flags than at prepare");
    if (options_.drop_page_cache)
    {
        model_->weights().drop_cached(range);
        transformed_.drop_cached(layer);
    }
    return Status();
}

// The loading thread: load(s) for every step in order, each after its dependency's computation.
// Whenever it stops early it stops the inference too, so no computation waits for a load forever.
void Executor::load_all()
{
    try
    {
        load_steps();
    }
    catch (const std::exception& e)
    {
        failure_.set(std::string("the loading thread threw: ") + e.what());
    }
    if (failure_.failed())
        progress_.stop();
    timespec cpu;
    loader_cpu_us_ = clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0 ? cpu.tv_sec * 1e6 + cpu.tv_nsec / 1e3 : 0;
}

void Executor::load_steps()
{
    if (pin_loader_ && ncnn::set_cpu_thread_affinity(loader_cpus_) != 0)
        failure_.set("cannot pin the loading thread to its cores (" + std::to_string(loader_cpus_.num_enabled()) + " chosen)");
    weights_.begin_inference(std::this_thread::get_id());
    for (int step = 1; step < schedule_.output_step() && !failure_.failed(); step++)
    {
        if (!resident_[step] || !built_[step])
        {
            const int wait_for = options_.overlap_loading ? wait_for_[step] : std::max(wait_for_[step], step - 1);
            if (wait_for >= 0 && !progress_.wait_computed(wait_for))
            {
                failure_.set("load of " + step_name_(step) + " waited for the computation of " + step_name_(wait_for)
                             + ", which did not happen");
                break;
            }
        }
        if (!load_if_needed(step))
            break;
    }
}

bool Executor::load_if_needed(int step)
{
    if (failure_.failed())
        return false;
    if (!resident_[step] || !built_[step])
    {
        Status s = load_step(step);
        if (!s.ok())
        {
            failure_.set(s.message());
            return false;
        }
        built_[step] = resident_[step];
        loaded_layers_++;
    }
    progress_.loaded(step);
    return true;
}

// Every step up to `step` not loaded yet, in order, on the computing thread: each one's
// dependency computed before it (a step's load waits for an earlier step's computation), so its
// arena bytes are free, as the loading thread would find them, only later. False when a load failed.
bool Executor::load_through(int step)
{
    for (; next_load_ <= step; next_load_++)
        if (!load_if_needed(next_load_))
            return false;
    return true;
}

void Executor::give_back_uncomputed()
{
    for (int step = 1; step < schedule_.output_step(); step++)
    {
        Status s = maps_[step] && !(resident_[step] && built_[step]) ? mapped_.restore(layer_at(step)) : Status();
        if (!s.ok())
            failure_.set(s.message());
    }
}

int Executor::before_compute(int layer_index)
{
    const int step = compute_clock_.started() + 1;
    if (step >= schedule_.output_step() || layer_at(step) != layer_index)
    {
        failure_.set("NCNN computes layer " + model_->layer_name(layer_index) + " where the plan has "
                     + (step < schedule_.output_step() ? step_name_(step) : "no more layers")
                     + ": the execution order differs from prepare's");
        progress_.stop();
        return -1;
    }
    progress_.computed(step - 1);
    if (failure_.failed())
    {
        progress_.stop();
        return -1;
    }
    faults_.delay();
    const double t0 = now_us();
    bool loaded;
    try
    {
        loaded = computing_loads() ? load_through(step) : progress_.wait_loaded(step);
    }
    catch (const std::exception& e) // never through NCNN's frames (as PlannedLayer::compute)
    {
        failure_.set("load of " + step_name_(step) + " threw: " + e.what());
        loaded = false;
    }
    load_wait_us_ += now_us() - t0;
    if (!loaded || failure_.failed())
        return -1;
    compute_clock_.begin(step);
    return 0;
}

int Executor::raised(int layer_index, const std::string& what)
{
    failure_.set("layer " + model_->layer_name(layer_index) + " threw: " + what);
    return after_compute(layer_index, -1);
}

int Executor::after_compute(int layer_index, int ret)
{
    compute_clock_.end();
    // a streamed layer is built again by its next load: its NCNN objects go now, so the process
    // holds those of the layers between their load and their computation, not of every layer (called
    // from the layer's own forward, which touches nothing of it after this returns; ret == 0 means
    // before_compute passed, so the clock's step is this layer's and its load is done). Its weights
    // are its own until this step is signalled computed: releasing them writes their refcounts
    // there. Without the static arena they go back to the heap. A mapped layer keeps its objects:
    // the pages its refcounts lie in may be given back below.
    const int step = compute_clock_.started();
    if (ret == 0 && !resident_[step] && (!options_.static_arena || !maps_[step]))
        model_->planned(layer_index)->unload(load_opt_);
    // a streamed layer's record pages that a written tensor takes next are the arena's again before
    // this step ends: that tensor is this thread's (a later step's) or a load waiting for this step
    if (ret == 0 && maps_[step] && !resident_[step])
    {
        Status s = mapped_.give_back(layer_index, arena_.get(), give_back_.of(step));
        if (!s.ok())
            failure_.set(s.message());
    }
    // a streamed layer's weights die with its computation: the next load into their bytes (after
    // this step, by the plan's dependencies) finds them poisoned
    if (ret == 0 && canary_.armed() && !resident_[step])
        for (const auto& range : weight_ranges_.of(step))
            canary_.poison(range.first, range.second);
    if (ret != 0 && !failure_.failed())
        failure_.set("layer " + model_->layer_name(layer_index) + " failed to compute (NCNN error " + std::to_string(ret) + ")");
    if (failure_.failed())
    {
        progress_.stop();
        return -1;
    }
    return 0;
}

void Executor::inject_faults(const FaultPlan& faults)
{
    std::lock_guard<std::mutex> turn(turn_);
    faults_.arm(faults);
}

Status Executor::run(const NamedMats& inputs, NamedMats& outputs, RunStats& stats)
{
    outputs.clear();
    const Status s = run(
        inputs,
        [&outputs](const std::string& name, const ncnn::Mat& output) {
            ncnn::Mat copy = output.clone(); // plain heap: the caller's
            if (copy.empty() && !output.empty())
                return Status::error("cannot copy output '" + name + "' out of the arena");
            outputs.emplace_back(name, copy);
            return Status();
        },
        stats);
    if (!s.ok())
        outputs.clear();
    return s;
}

Status Executor::run(const NamedMats& inputs, const OutputTaker& take, RunStats& stats)
{
    std::lock_guard<std::mutex> turn(turn_);
    try
    {
        return run_locked(inputs, take, stats);
    }
    catch (const std::exception& e)
    {
        // thrown outside any layer (copying the inputs in or the outputs out); the loading thread has
        // been joined on the way out, and the next run starts from its own state
        give_back_uncomputed();
        model_->release_bounded_tops();
        return Status::error(std::string("the inference threw: ") + e.what());
    }
}

Status Executor::run_locked(const NamedMats& inputs, const OutputTaker& take, RunStats& stats)
{
    if (!has_plan_)
        return Status::error("no plan: set a plan or a budget first");
    if (inputs.size() != schedule_.inputs.size())
        return Status::error("the model was prepared with " + std::to_string(schedule_.inputs.size()) + " inputs, got "
                             + std::to_string(inputs.size()));
    for (size_t k = 0; k < inputs.size(); k++)
    {
        if (inputs[k].first != schedule_.inputs[k])
            return Status::error("input " + std::to_string(k) + " is '" + inputs[k].first + "', the model was prepared with '"
                                 + schedule_.inputs[k] + "'");
        // an input of another size would have NCNN's layers read past it, inside the arena, or
        // request other buffers than the plan holds
        const ncnn::Mat& m = inputs[k].second;
        uint64_t bytes = (uint64_t)m.total() * m.elemsize;
        if (!schedule_.input_uses[k].in_place())
        {
            RequestProbe probe;
            m.clone(&probe);
            bytes = probe.requested;
        }
        if (bytes != input_bytes_[k])
            return Status::error("input '" + inputs[k].first + "' (w=" + std::to_string(m.w) + " h=" + std::to_string(m.h)
                                 + " c=" + std::to_string(m.c) + ") takes " + std::to_string(bytes)
                                 + " B, the model was prepared with " + std::to_string(input_bytes_[k]) + " B: prepare it for this shape");
        if (schedule_.input_uses[k].in_place() && !reads_in_place(m))
            return Status::error("input '" + inputs[k].first + "' is read where it lies, as prepare read it: it must be unpacked "
                                 "fp32 whose channels start 16-byte aligned, with 64 readable bytes after it");
    }

    const double started = now_us();
    failure_.clear();
    progress_.reset();
    compute_clock_.reset();
    load_wait_us_ = 0;
    loader_cpu_us_ = 0;
    loaded_layers_ = 0;
    mapped_weight_bytes_ = 0;
    mapped_.reset_peak();
    outside_.reset_counts();
    faults_.begin_run();
    if (canary_.armed())
    {
        std::vector<std::pair<uint64_t, uint64_t> > built;
        for (size_t step = 0; step < built_.size(); step++)
            if (built_[step])
            {
                const auto ranges = weight_ranges_.of(step);
                built.insert(built.end(), ranges.begin(), ranges.end());
            }
        canary_.poison_all_but(built);
    }
    blobs_.begin_inference(std::this_thread::get_id());
    workspace_.begin_inference(std::this_thread::get_id());
    next_load_ = 1;
    if (computing_loads())
        weights_.begin_inference(std::this_thread::get_id());
    LoadingThread loader(*this, !computing_loads());

    std::vector<std::unique_ptr<ReadOnlyInput> > in_place; // outlive the extractor holding their headers
    std::vector<ncnn::Mat> features;
    ncnn::Extractor ex = model_->net().create_extractor();
    ex.set_blob_allocator(&blobs_);
    ex.set_workspace_allocator(&workspace_);
    {
        ThreadAllocatorScope scope(&blobs_);
        compute_clock_.begin(0);
        for (size_t k = 0; k < inputs.size(); k++)
        {
            const auto& input = inputs[k];
            if (schedule_.input_uses[k].in_place())
            {
                in_place.push_back(std::make_unique<ReadOnlyInput>(input.second));
                ex.input(input.first.c_str(), in_place.back()->mat());
                continue;
            }
            ncnn::Mat in_arena = input.second.clone(&blobs_);
            if (in_arena.empty())
                failure_.set("cannot copy input '" + input.first + "' into the arena");
            ex.input(input.first.c_str(), in_arena);
        }
        compute_clock_.end();
        for (const std::string& name : schedule_.outputs)
        {
            if (failure_.failed())
                break;
            ncnn::Mat feature;
            if (ex.extract(name.c_str(), feature) != 0)
            {
                failure_.set("NCNN failed to compute output '" + name + "'");
                break;
            }
            features.push_back(feature);
        }
    }
    if (!failure_.failed() && compute_clock_.started() != schedule_.output_step() - 1)
    {
        failure_.set("only " + std::to_string(compute_clock_.started()) + " of the plan's " + std::to_string(schedule_.order.size())
                     + " layers computed: the execution order differs from prepare's");
    }
    progress_.computed(schedule_.output_step() - 1);
    loader.join();
    if (failure_.failed())
        give_back_uncomputed();

    compute_clock_.begin(schedule_.output_step());
    for (size_t k = 0; k < features.size() && !failure_.failed(); k++)
    {
        const Status taken = take(schedule_.outputs[k], features[k]);
        if (!taken.ok())
            failure_.set(taken.message());
    }
    features.clear();
    ex.clear();
    model_->release_bounded_tops();
    compute_clock_.end();

    const AllocationCounts outside = outside_.counts();
    stats.latency_us = now_us() - started;
    stats.load_wait_us = load_wait_us_;
    stats.loader_cpu_us = loader_cpu_us_;
    stats.outside_peak_bytes = outside.peak_bytes;
    stats.outside_allocations = outside.allocations;
    stats.loaded_layers = loaded_layers_;
    stats.built_layers = 0;
    for (int layer : schedule_.order)
        stats.built_layers += model_->planned(layer)->built();
    stats.arena_weight_bytes = weights_.served_bytes();
    stats.mapped_weight_bytes = mapped_weight_bytes_;
    stats.mapped_peak_bytes = mapped_.peak_bytes();
    return failure_.status();
}

} // namespace flexnn
