// SPDX-License-Identifier: Apache-2.0
// The device in torch.profiler (Kineto): a libkineto IActivityProfiler registered for
// PrivateUse1 (REGISTER_PRIVATEUSE1_PROFILER). While a session records, the bridge reports the
// device's activity (DeviceActivity.h); the session turns each report into the rows Kineto
// writes for a GPU: a "kernel" / "gpu_memcpy" / "gpu_memset" row on the device (pid = device
// index, tid = stream), named, classified and described as hal/hal_activity.h says, as the
// HAL's trace layer writes the same work (HAL_LAYERS=trace), and the host-side call that issued it
// as a runtime row on the calling thread, both carrying the correlation id of the CPU operator
// around them (Kineto pushes it to the session when the operator starts), joined by an ac2g flow
// and linked to that operator.
//
// Times: work the bridge runs on the calling thread (the fallback's operators, in place on
// host-addressable memory or staged through host memory) is timed with the host clock; work
// enqueued on a stream (HAL programs) with HAL timing events around it, put on the host clock
// through a timing event each device completed when the session started.
#define FMT_HEADER_ONLY 1
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <libkineto.h>
#include <output_base.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/DeviceActivity.h"
#include "runtime/Register.h"
#include "runtime/Runtime.h"

namespace torch_hal
{
namespace
{

using libkineto::ActivityType;

std::atomic<bool> g_recording{ false };

// A timing event each device completed at a known host time: device times are read against it.
struct Reference {
    hal_event_t event = nullptr;
    int64_t host_ns = 0;
};

std::mutex g_mutex; // guards g_records and g_references
std::vector<Reference> g_references;

thread_local std::vector<uint64_t> t_correlation; // the CPU operators Kineto announced

int32_t systemThreadId()
{
    thread_local int32_t tid = static_cast<int32_t>(::syscall(SYS_gettid));
    return tid;
}

uint64_t currentCorrelation()
{
    return t_correlation.empty() ? 0 : t_correlation.back();
}

struct Record {
    DeviceActivityKind kind;
    std::string name;
    c10::DeviceIndex device;
    int64_t stream;
    int64_t start_ns; // on the device (stream-timed: filled when the session stops)
    int64_t end_ns;
    const char *call; // the host-side call that issued it, or null
    int64_t call_start_ns;
    int64_t call_end_ns;
    int64_t bytes;
    const char *detail;
    uint64_t correlation;
    int32_t thread;
    hal_event_t start_event = nullptr; // stream-timed activities; null otherwise
    hal_event_t end_event = nullptr;
    std::shared_ptr<const CollectiveDescription> collective = nullptr; // collectives' rows
};

std::vector<Record> g_records;

Record makeRecord(const DeviceActivity &a)
{
    return Record{ a.kind,          a.name,          a.stream.device_index(),
                   a.stream.id(),   a.start_ns,      a.end_ns,
                   a.call,          a.call_start_ns, a.call_end_ns,
                   a.bytes,         a.detail,        currentCorrelation(),
                   systemThreadId() };
}

bool timingEvents(c10::DeviceIndex index)
{
    return (deviceProperties(index).capabilities & HAL_DEVICE_CAP_TIMING_EVENTS) != 0;
}

void destroyEvent(hal_event_t &event)
{
    if (event != nullptr)
        TORCH_HAL_WARN_ON_ERROR(hal_event_destroy(event));
    event = nullptr;
}

void startRecording()
{
    std::vector<Reference> references(static_cast<size_t>(deviceCount()));
    for (c10::DeviceIndex i = 0; i < deviceCount(); ++i) {
        if (!ownsDevice(i) || !deviceInitialized(i) || !timingEvents(i))
            continue;
        Reference &r = references[static_cast<size_t>(i)];
        hal_stream_t stream = currentHalStream(i);
        if (hal_stream_synchronize(stream) != HAL_OK ||
            hal_event_create(halDevice(i), HAL_EVENT_FLAG_TIMING, &r.event) != HAL_OK)
            continue;
        // The idle stream completes the event between these two host times: the midpoint.
        const int64_t before = deviceActivityNow();
        if (hal_event_record(r.event, stream) != HAL_OK || hal_event_synchronize(r.event) != HAL_OK)
            destroyEvent(r.event);
        r.host_ns = before + (deviceActivityNow() - before) / 2;
    }
    std::lock_guard<std::mutex> lock(g_mutex);
    for (Reference &r : g_references)
        destroyEvent(r.event);
    g_references = std::move(references);
    g_records.clear();
    g_recording.store(true, std::memory_order_release);
}

// Device time of a stream-timed event, on the host clock; false if it cannot be read.
bool deviceTime(const Reference &reference, hal_event_t event, int64_t *ns)
{
    float ms = 0;
    if (reference.event == nullptr || hal_event_synchronize(event) != HAL_OK ||
        hal_event_elapsed_ms(reference.event, event, &ms) != HAL_OK)
        return false;
    *ns = reference.host_ns + static_cast<int64_t>(static_cast<double>(ms) * 1e6);
    return true;
}

std::vector<Record> stopRecording()
{
    g_recording.store(false, std::memory_order_release);
    std::vector<Record> records;
    std::vector<Reference> references;
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        records.swap(g_records);
        references.swap(g_references);
    }
    for (Record &r : records) {
        if (r.start_event == nullptr)
            continue;
        const Reference &ref = references[static_cast<size_t>(r.device)];
        if (!deviceTime(ref, r.start_event, &r.start_ns) ||
            !deviceTime(ref, r.end_event, &r.end_ns)) {
            r.start_ns = r.call_start_ns; // no device clock: the launch's own span
            r.end_ns = r.call_end_ns;
        }
        destroyEvent(r.start_event);
        destroyEvent(r.end_event);
    }
    for (Reference &r : references)
        destroyEvent(r.event);
    // A stream runs one thing at a time; what the conversion of event times to the host clock
    // (its error: microseconds) would make overlap is moved to start where the earlier ended.
    // Event records and waits (host calls only) stay as they were, after the stream's rows.
    std::stable_sort(records.begin(), records.end(), [](const Record &a, const Record &b) {
        const bool a_sync = a.kind == DeviceActivityKind::Sync;
        const bool b_sync = b.kind == DeviceActivityKind::Sync;
        return std::tie(a.device, a.stream, a_sync, a.start_ns) <
               std::tie(b.device, b.stream, b_sync, b.start_ns);
    });
    for (size_t i = 1; i < records.size(); ++i) {
        const Record &prev = records[i - 1];
        Record &r = records[i];
        if (r.device == prev.device && r.stream == prev.stream &&
            r.kind != DeviceActivityKind::Sync && prev.kind != DeviceActivityKind::Sync &&
            r.start_ns < prev.end_ns) {
            r.start_ns = prev.end_ns;
            r.end_ns = std::max(r.end_ns, r.start_ns);
        }
    }
    return records;
}

// A value for addMetadataQuoted, which writes it between quotes as it is.
std::string jsonString(const std::string &value)
{
    std::string out;
    for (char ch : value) {
        if (ch == '"' || ch == '\\')
            out += '\\';
        if (static_cast<unsigned char>(ch) >= 0x20)
            out += ch;
    }
    return out;
}

ActivityType activityType(DeviceActivityKind kind)
{
    switch (kind) {
    case DeviceActivityKind::Memcpy:
        return ActivityType::GPU_MEMCPY;
    case DeviceActivityKind::Memset:
        return ActivityType::GPU_MEMSET;
    case DeviceActivityKind::Sync:
        return ActivityType::PRIVATEUSE1_RUNTIME;
    case DeviceActivityKind::Kernel:
        break;
    }
    return ActivityType::CONCURRENT_KERNEL;
}

class HalProfilerSession final : public libkineto::IActivityProfilerSession
{
  public:
    explicit HalProfilerSession(std::set<ActivityType> types) : types_(std::move(types)) {}

    void start() override
    {
        start_ns_ = deviceActivityNow();
        startRecording();
        status_ = libkineto::TraceStatus::RECORDING;
    }

    void stop() override
    {
        records_ = stopRecording();
        end_ns_ = deviceActivityNow();
        status_ = libkineto::TraceStatus::READY;
    }

    std::vector<std::string> errors() override
    {
        return {};
    }

    void processTrace(libkineto::ActivityLogger &logger) override
    {
        processTrace(logger, nullptr, 0, 0);
    }

    void processTrace(libkineto::ActivityLogger &logger,
                      libkineto::getLinkedActivityCallback linked, int64_t /*start*/,
                      int64_t /*end*/) override
    {
        buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
        buffer_->span = libkineto::TraceSpan(start_ns_, end_ns_, "torch_hal");
        const int32_t pid = static_cast<int32_t>(::getpid());
        for (const Record &r : records_) {
            const ActivityType type = activityType(r.kind);
            if (types_.count(type) == 0)
                continue;
            const libkineto::ITraceActivity *cpu_op =
                linked && r.correlation != 0 ? linked(static_cast<int32_t>(r.correlation))
                                             : nullptr;
            const auto correlation = static_cast<int32_t>(r.correlation);
            const bool flow = r.call != nullptr && r.correlation != 0;
            if (r.call != nullptr && types_.count(ActivityType::PRIVATEUSE1_RUNTIME) != 0) {
                buffer_->emplace_activity(buffer_->span, ActivityType::PRIVATEUSE1_RUNTIME, r.call);
                libkineto::GenericTraceActivity &call = *buffer_->activities.back();
                call.startTime = r.call_start_ns;
                call.endTime = r.call_end_ns;
                call.id = correlation;
                call.device = pid;
                call.resource = r.thread;
                call.threadId = r.thread;
                call.linked = cpu_op;
                if (r.kind != DeviceActivityKind::Sync) { // the ac2g arrow to the device row
                    call.flow.id = static_cast<uint32_t>(r.correlation);
                    call.flow.type = libkineto::kLinkAsyncCpuGpu;
                    call.flow.start = 1;
                }
                call.addMetadata("correlation", r.correlation);
                if (r.kind == DeviceActivityKind::Sync) { // no device row: what and where
                    call.addMetadata(HAL_ACTIVITY_ARG_DEVICE, r.device);
                    call.addMetadata(HAL_ACTIVITY_ARG_STREAM, r.stream);
                }
                call.log(logger);
            }
            if (r.kind == DeviceActivityKind::Sync)
                continue;
            buffer_->emplace_activity(buffer_->span, type, r.name);
            libkineto::GenericTraceActivity &act = *buffer_->activities.back();
            act.startTime = r.start_ns;
            act.endTime = r.end_ns;
            act.id = correlation;
            act.device = r.device;
            act.resource = static_cast<int32_t>(r.stream);
            act.threadId = static_cast<int32_t>(r.stream);
            act.linked = cpu_op;
            if (flow) { // the ac2g arrow from the call (one per call)
                act.flow.id = static_cast<uint32_t>(r.correlation);
                act.flow.type = libkineto::kLinkAsyncCpuGpu;
                act.flow.start = 0;
            }
            // The argument keys of hal_activity.h, as the trace layer writes them.
            act.addMetadata(HAL_ACTIVITY_ARG_DEVICE, r.device);
            act.addMetadata(HAL_ACTIVITY_ARG_STREAM, r.stream);
            act.addMetadata("correlation", r.correlation);
            if (r.kind == DeviceActivityKind::Memcpy || r.bytes > 0)
                act.addMetadata(HAL_ACTIVITY_ARG_BYTES, r.bytes);
            if (r.detail != nullptr)
                act.addMetadataQuoted(
                    r.kind == DeviceActivityKind::Memcpy ? HAL_ACTIVITY_ARG_DIRECTION : "execution",
                    r.detail);
            act.addMetadataQuoted(HAL_ACTIVITY_ARG_BACKEND, backendName());
            if (const CollectiveDescription *c = r.collective.get()) {
                act.addMetadataQuoted("Collective name", jsonString(c->name));
                act.addMetadataQuoted("dtype", jsonString(c->dtype));
                act.addMetadata("In msg nelems", c->in_elements);
                act.addMetadata("Out msg nelems", c->out_elements);
                act.addMetadataQuoted("Process Group Name", jsonString(c->group_name));
                act.addMetadataQuoted("Process Group Description", jsonString(c->group_desc));
                act.addMetadataQuoted("Process Group Ranks", jsonString(c->group_ranks));
                act.addMetadata("Group size", c->group_size);
                act.addMetadata("Rank", c->rank);
                if (c->peer >= 0)
                    act.addMetadata("Peer rank", c->peer);
            }
            act.log(logger);
            streams_.insert({ r.device, r.stream });
            devices_.insert(r.device);
        }
        for (c10::DeviceIndex d : devices_) {
            libkineto::DeviceInfo info{ d, d, deviceTypeName() + ":" + std::to_string(d),
                                        "torch_hal " + backendName() };
            logger.handleDeviceInfo(info, start_ns_);
        }
        records_.clear();
    }

    std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override
    {
        return nullptr; // every device was named in processTrace
    }

    std::vector<libkineto::ResourceInfo> getResourceInfos() override
    {
        std::vector<libkineto::ResourceInfo> out;
        for (const auto &[device, stream] : streams_)
            out.push_back({ stream, stream, device, "stream " + std::to_string(stream) });
        return out;
    }

    std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override
    {
        return std::move(buffer_);
    }

    void pushCorrelationId(uint64_t id) override
    {
        t_correlation.push_back(id);
    }

    void popCorrelationId() override
    {
        if (!t_correlation.empty())
            t_correlation.pop_back();
    }

  private:
    std::set<ActivityType> types_;
    int64_t start_ns_ = 0, end_ns_ = 0;
    std::vector<Record> records_;
    std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
    std::set<std::pair<c10::DeviceIndex, int64_t>> streams_;
    std::set<c10::DeviceIndex> devices_;
};

class HalActivityProfiler final : public libkineto::IActivityProfiler
{
  public:
    const std::string &name() const override
    {
        static const std::string name = "torch_hal";
        return name;
    }

    const std::set<ActivityType> &availableActivities() const override
    {
        static const std::set<ActivityType> types = { ActivityType::CONCURRENT_KERNEL,
                                                      ActivityType::GPU_MEMCPY,
                                                      ActivityType::GPU_MEMSET,
                                                      ActivityType::PRIVATEUSE1_RUNTIME };
        return types;
    }

    std::unique_ptr<libkineto::IActivityProfilerSession>
    configure(const std::set<ActivityType> &activity_types,
              const libkineto::Config & /*config*/) override
    {
        std::set<ActivityType> wanted;
        for (ActivityType t : availableActivities())
            if (activity_types.count(t) != 0)
                wanted.insert(t);
        if (wanted.empty() || !isBackendOpen())
            return nullptr;
        return std::make_unique<HalProfilerSession>(std::move(wanted));
    }

    std::unique_ptr<libkineto::IActivityProfilerSession>
    configure(int64_t /*ts_ms*/, int64_t /*duration_ms*/,
              const std::set<ActivityType> &activity_types,
              const libkineto::Config &config) override
    {
        return configure(activity_types, config);
    }
};

} // namespace

bool deviceActivityRecording() noexcept
{
    return g_recording.load(std::memory_order_relaxed);
}

int64_t deviceActivityNow() noexcept
{
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

void recordDeviceActivity(const DeviceActivity &activity)
{
    if (!deviceActivityRecording())
        return;
    Record r = makeRecord(activity);
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_recording.load(std::memory_order_relaxed))
        g_records.push_back(std::move(r));
}

void recordStreamSync(const char *call, const c10::Stream &stream, int64_t start_ns, int64_t end_ns)
{
    recordDeviceActivity({ DeviceActivityKind::Sync, call, stream, start_ns, end_ns, call, start_ns,
                           end_ns, 0, nullptr });
}

StreamActivity::StreamActivity(DeviceActivityKind kind, const char *name, const c10::Stream &stream,
                               int64_t bytes, const char *detail)
    : kind_(kind), name_(name), stream_(stream), bytes_(bytes), detail_(detail)
{
    if (!deviceActivityRecording())
        return;
    host_start_ = deviceActivityNow();
    if (!timingEvents(stream.device_index()))
        return;
    if (hal_event_create(halDevice(stream.device_index()), HAL_EVENT_FLAG_TIMING, &start_) !=
            HAL_OK ||
        hal_event_record(start_, halStream(stream_)) != HAL_OK)
        destroyEvent(start_);
}

void StreamActivity::describe(std::shared_ptr<const CollectiveDescription> collective)
{
    if (host_start_ != 0)
        collective_ = std::move(collective);
}

void StreamActivity::end()
{
    if (host_start_ == 0)
        return;
    const int64_t host_end = deviceActivityNow();
    hal_event_t end_event = nullptr;
    if (start_ != nullptr && (hal_event_create(halDevice(stream_.device_index()),
                                               HAL_EVENT_FLAG_TIMING, &end_event) != HAL_OK ||
                              hal_event_record(end_event, halStream(stream_)) != HAL_OK)) {
        destroyEvent(end_event);
        destroyEvent(start_);
    }
    const char *call = kind_ == DeviceActivityKind::Memcpy   ? "hal_memcpy_async"
                       : kind_ == DeviceActivityKind::Memset ? "hal_memset_async"
                                                             : "hal_kernel_launch";
    Record r = makeRecord({ kind_, name_, stream_, host_start_, host_end, call, host_start_,
                            host_end, bytes_, detail_ });
    r.start_event = start_;
    r.end_event = end_event;
    r.collective = std::move(collective_);
    start_ = nullptr;
    host_start_ = 0;
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_recording.load(std::memory_order_relaxed)) {
        g_records.push_back(std::move(r));
        return;
    }
    destroyEvent(r.start_event); // the session stopped meanwhile
    destroyEvent(r.end_event);
}

StreamActivity::~StreamActivity()
{
    destroyEvent(start_); // end() was not reached (an exception)
}

void registerKinetoProfiler()
{
    static std::once_flag once;
    std::call_once(once, [] {
        torch::profiler::impl::PrivateUse1ProfilerRegistry::instance().registerFactory(
            []() -> std::unique_ptr<libkineto::IActivityProfiler> {
                return std::make_unique<HalActivityProfiler>();
            });
    });
}

} // namespace torch_hal
