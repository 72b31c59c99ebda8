// SPDX-License-Identifier: Apache-2.0
// The torch_hal c10d backend: see ProcessGroupHAL.h for the design.
#include "distributed/ProcessGroupHAL.h"

#include <ATen/ATen.h>
#include <ATen/core/jit_type.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <numeric>

#include "runtime/Allocator.h"

namespace torch_hal
{

// ---- Errors -----------------------------------------------------------------------------------

namespace
{

c10::DistBackendError distError(const std::string &message)
{
    return c10::DistBackendError(
        c10::SourceLocation{ __func__, __FILE__, static_cast<uint32_t>(__LINE__) }, message);
}

[[noreturn]] void throwDist(const std::string &message)
{
    throw distError(message);
}

[[noreturn]] void notImplemented(const std::string &message)
{
    C10_THROW_ERROR(NotImplementedError, message);
}

// A failed HAL call of the process group: torch.distributed.DistBackendError naming the HAL
// status, the call and hal_last_error_message().
void checkComm(hal_status_t status, const char *call)
{
    if (C10_UNLIKELY(status != HAL_OK))
        throwDist(halErrorMessage(status, call));
}

// ---- The store, as the HAL sees it --------------------------------------------------------------

// hal_comm_store_t over a c10d::Store. Called from hal_comm_init on the initialising thread;
// exceptions never cross into the HAL.
struct StoreAdapter {
    c10::intrusive_ptr<c10d::Store> store;
    std::mutex mutex;
    std::string last_error; // the last store failure, for the init error message

    void remember(const char *what, const char *key, const std::exception &e)
    {
        std::lock_guard<std::mutex> lock(mutex);
        last_error = std::string(what) + "(\"" + key + "\"): " + e.what();
    }

    static hal_status_t set(void *user_data, const char *key, const void *value, size_t size)
    {
        auto *self = static_cast<StoreAdapter *>(user_data);
        try {
            const auto *bytes = static_cast<const uint8_t *>(value);
            self->store->set(key, std::vector<uint8_t>(bytes, bytes + size));
            return HAL_OK;
        } catch (const std::exception &e) {
            self->remember("set", key, e);
            return HAL_ERROR_REMOTE;
        }
    }

    static hal_status_t get(void *user_data, const char *key, void *value, size_t capacity,
                            size_t *size, uint32_t timeout_ms)
    {
        auto *self = static_cast<StoreAdapter *>(user_data);
        try {
            // Polled with check(): c10d stores read a 0 ms wait() as "the store's default
            // timeout", and TCPStore logs a warning for every wait() that times out (the HAL
            // asks in short slices so that it notices aborts).
            auto deadline =
                std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
            auto pause = std::chrono::microseconds(200);
            while (!self->store->check({ key })) {
                auto now = std::chrono::steady_clock::now();
                if (now >= deadline)
                    return HAL_ERROR_TIMEOUT;
                std::this_thread::sleep_for(
                    std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
                pause = std::min(pause * 2, std::chrono::microseconds(5000));
            }
            std::vector<uint8_t> bytes = self->store->get(key);
            *size = bytes.size();
            std::memcpy(value, bytes.data(), std::min(capacity, bytes.size()));
            return HAL_OK;
        } catch (const std::exception &e) {
            self->remember("get", key, e);
            return HAL_ERROR_REMOTE;
        }
    }
};

// ---- Tensors ------------------------------------------------------------------------------------

void checkDeviceTensor(const at::Tensor &t, const char *what)
{
    TORCH_CHECK_VALUE(t.defined(), "torch_hal process group: ", what, " is undefined");
    TORCH_CHECK_VALUE(t.device().type() == kDeviceType, "torch_hal process group: ", what,
                      " must be a ", deviceTypeName(), " tensor, got a tensor on ", t.device(),
                      " (the process group serves only ", deviceTypeName(),
                      " tensors; use 'cpu:gloo,", deviceTypeName(),
                      ":torch_hal' as the backend for CPU tensors too)");
    TORCH_CHECK_VALUE(t.layout() == at::kStrided, "torch_hal process group: ", what,
                      " must be a strided (dense) tensor, got layout ", t.layout());
}

// Element-wise collectives only need the elements to fill their storage range.
void checkDense(const at::Tensor &t, const char *what)
{
    checkDeviceTensor(t, what);
    TORCH_CHECK_VALUE(t.is_non_overlapping_and_dense(), "torch_hal process group: ", what,
                      " must be dense (non-overlapping, no gaps); call .contiguous() first");
}

void checkContiguous(const at::Tensor &t, const char *what)
{
    checkDeviceTensor(t, what);
    TORCH_CHECK_VALUE(t.is_contiguous(), "torch_hal process group: ", what,
                      " must be contiguous; call .contiguous() first");
}

void checkSameDevice(const at::Tensor &t, c10::Device device, const char *what)
{
    TORCH_CHECK_VALUE(t.device() == device, "torch_hal process group: all tensors must be on ",
                      device, ", but ", what, " is on ", t.device());
}

void checkSingle(const std::vector<at::Tensor> &tensors, const char *op)
{
    TORCH_CHECK_VALUE(tensors.size() == 1, "torch_hal process group: ", op,
                      " takes exactly one tensor per rank, got ", tensors.size());
}

std::optional<hal_dtype_t> halDtype(at::ScalarType type)
{
    switch (type) {
    case at::kChar:
        return HAL_DTYPE_I8;
    case at::kByte:
    case at::kBool:
        return HAL_DTYPE_U8;
    case at::kInt:
        return HAL_DTYPE_I32;
    case at::kUInt32:
        return HAL_DTYPE_U32;
    case at::kLong:
        return HAL_DTYPE_I64;
    case at::kUInt64:
        return HAL_DTYPE_U64;
    case at::kHalf:
        return HAL_DTYPE_F16;
    case at::kFloat:
        return HAL_DTYPE_F32;
    case at::kDouble:
        return HAL_DTYPE_F64;
    case at::kBFloat16:
        return HAL_DTYPE_BF16;
    case at::kFloat8_e4m3fn:
        return HAL_DTYPE_F8_E4M3;
    case at::kFloat8_e5m2:
        return HAL_DTYPE_F8_E5M2;
    default:
        return std::nullopt;
    }
}

// What a tensor is to a HAL call: address, element count and element type.
struct Payload {
    void *ptr;
    size_t count;
    hal_dtype_t dtype;
};

// Data movement (broadcast, gathers, all-to-all, point to point): any dtype; one the HAL has
// no type for moves as bytes. FP8 also moves as bytes (no backend capability needed).
Payload movePayload(const at::Tensor &t)
{
    std::optional<hal_dtype_t> dtype = halDtype(t.scalar_type());
    if (dtype && *dtype != HAL_DTYPE_F8_E4M3 && *dtype != HAL_DTYPE_F8_E5M2)
        return { t.data_ptr(), static_cast<size_t>(t.numel()), *dtype };
    return { t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size(), HAL_DTYPE_U8 };
}

// Reductions: the element type must be one the HAL reduces.
Payload reducePayload(const at::Tensor &t)
{
    std::optional<hal_dtype_t> dtype = halDtype(t.scalar_type());
    TORCH_CHECK_VALUE(dtype.has_value(), "torch_hal process group: reductions do not support ",
                      t.scalar_type(),
                      " tensors (supported: int8, uint8, bool, int32, uint32, int64, uint64, "
                      "float16, bfloat16, float32, float64, and float8 where the device has "
                      "HAL_DEVICE_CAP_FP8_COLLECTIVES)");
    return { t.data_ptr(), static_cast<size_t>(t.numel()), *dtype };
}

hal_redop_t halRedop(const c10d::ReduceOp &op, at::ScalarType type)
{
    const bool boolean = type == at::kBool;
    switch (op.op_) {
    case c10d::ReduceOp::SUM:
        return boolean ? HAL_REDOP_MAX : HAL_REDOP_SUM; // logical or, as NCCL does
    case c10d::ReduceOp::PRODUCT:
        return boolean ? HAL_REDOP_MIN : HAL_REDOP_PROD; // logical and
    case c10d::ReduceOp::MIN:
        return HAL_REDOP_MIN;
    case c10d::ReduceOp::MAX:
        return HAL_REDOP_MAX;
    case c10d::ReduceOp::AVG:
        TORCH_CHECK_VALUE(!boolean,
                          "torch_hal process group: ReduceOp.AVG is not defined for bool tensors");
        return HAL_REDOP_AVG;
    case c10d::ReduceOp::PREMUL_SUM:
        notImplemented("torch_hal process group: ReduceOp.PREMUL_SUM is not supported (the HAL "
                       "reduces with SUM, PROD, MIN, MAX and AVG); multiply the tensor by the "
                       "factor and use ReduceOp.SUM");
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
        notImplemented("torch_hal process group: bitwise reductions (BAND, BOR, BXOR) are not "
                       "supported by the HAL");
    default:
        notImplemented("torch_hal process group: unsupported reduce op " +
                       std::to_string(static_cast<int>(op.op_)));
    }
}

// Complex tensors reduce as their real views for the element-wise sums (as torch does).
at::Tensor reducible(const at::Tensor &t, const c10d::ReduceOp &op)
{
    if (!t.is_complex())
        return t;
    TORCH_CHECK_VALUE(c10d::isComplexViewAsRealAllowed(op),
                      "torch_hal process group: this reduce op is not supported on complex "
                      "tensors (only SUM and AVG are)");
    return at::view_as_real(t);
}

// Enqueues `body`'s HAL calls as one group (they run concurrently: point-to-point exchanges
// cannot deadlock). A failure ends the group before it is reported.
template <typename Body> void grouped(Body &&body)
{
    checkComm(hal_group_begin(), "hal_group_begin");
    try {
        body();
    } catch (...) {
        (void)hal_group_end();
        throw;
    }
    checkComm(hal_group_end(), "hal_group_end");
}

// Marks a device tensor's memory as used by the communication stream, so that the caching
// allocator does not hand it out again before the collective is done with it.
void recordOnStream(const at::Tensor &t, const c10::Stream &stream)
{
    if (t.defined() && t.has_storage() && t.device().type() == kDeviceType)
        recordDeviceBlockOnStream(t.storage().data_ptr(), stream);
}

c10::intrusive_ptr<c10::ivalue::Future> makeFuture(c10::Device device)
{
    return c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()),
                                                    std::vector<c10::Device>{ device });
}

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>> &lists)
{
    std::vector<at::Tensor> out;
    for (const auto &list : lists)
        out.insert(out.end(), list.begin(), list.end());
    return out;
}

} // namespace

// ---- The communicator ---------------------------------------------------------------------------

// One HAL communicator and what runs with it. Shared by the process group and its Works, so
// that a Work can still be queried after the process group is gone.
struct CommState {
    hal_comm_t comm = nullptr;
    c10::DeviceIndex device = -1;
    c10::Stream stream;                // the communication stream
    hal_stream_t hal_stream = nullptr; // ... as a HAL stream
    hal_event_t ready = nullptr;       // recorded on the caller's stream, waited for by `stream`
    std::unique_ptr<StoreAdapter> store;
    std::mutex mutex; // guards `pool` and `comm` against close()
    std::vector<hal_event_t> pool;

    explicit CommState(c10::Stream s) : stream(s) {}

    hal_event_t takeEvent()
    {
        {
            std::lock_guard<std::mutex> lock(mutex);
            if (!pool.empty()) {
                hal_event_t e = pool.back();
                pool.pop_back();
                return e;
            }
        }
        hal_event_t e = nullptr;
        TORCH_HAL_CHECK(hal_event_create(halDevice(device), HAL_EVENT_FLAG_NONE, &e));
        return e;
    }

    void giveEvent(hal_event_t e) noexcept
    {
        try {
            std::lock_guard<std::mutex> lock(mutex);
            pool.push_back(e);
        } catch (...) {
            TORCH_HAL_WARN_ON_ERROR(hal_event_destroy(e));
        }
    }

    hal_status_t asyncError() const
    {
        hal_status_t error = HAL_OK;
        if (comm == nullptr || hal_comm_get_async_error(comm, &error) != HAL_OK)
            return HAL_OK;
        return error == HAL_IN_PROGRESS ? HAL_OK : error;
    }

    void abort() noexcept
    {
        if (comm != nullptr)
            TORCH_HAL_WARN_ON_ERROR(hal_comm_abort(comm));
    }

    // Releases the communicator (after its queued work, or at once if it failed).
    void close() noexcept
    {
        hal_comm_t c = nullptr;
        {
            std::lock_guard<std::mutex> lock(mutex);
            std::swap(c, comm);
        }
        if (c == nullptr)
            return;
        hal_status_t error = HAL_OK;
        if (hal_comm_get_async_error(c, &error) == HAL_OK && error != HAL_OK &&
            error != HAL_IN_PROGRESS)
            (void)hal_comm_abort(c);
        hal_status_t st = hal_comm_destroy(c);
        // A communicator that failed reports its error again here; that was reported already.
        if (st != HAL_OK && st != error)
            warnHalError(st, "hal_comm_destroy");
    }

    ~CommState()
    {
        close();
        for (hal_event_t e : pool)
            TORCH_HAL_WARN_ON_ERROR(hal_event_destroy(e));
        if (ready != nullptr)
            TORCH_HAL_WARN_ON_ERROR(hal_event_destroy(ready));
    }
};

Completion::~Completion()
{
    if (event != nullptr && comm)
        comm->giveEvent(event);
}

// ---- Work ---------------------------------------------------------------------------------------

WorkHAL::WorkHAL(int rank, c10d::OpType type, std::shared_ptr<Completion> completion,
                 std::vector<at::Tensor> outputs, c10::intrusive_ptr<c10::ivalue::Future> future,
                 std::chrono::milliseconds timeout)
    : c10d::Work(rank, type), completion_(std::move(completion)), outputs_(std::move(outputs)),
      future_(std::move(future)), timeout_(timeout)
{
}

hal_status_t WorkHAL::query() const
{
    if (!completion_->comm) // nothing was enqueued (an empty coalesced group)
        return HAL_OK;
    if (completion_->event == nullptr)
        return HAL_NOT_READY; // its coalesced group has not ended yet
    return hal_event_query(completion_->event);
}

void WorkHAL::throwFailure(hal_status_t status, const char *call) const
{
    std::string message = halErrorMessage(status, call); // reads this thread's HAL message first
    message += " (" + completion_->what + " of the torch_hal process group";
    if (completion_->comm) {
        // The event only knows that its stream failed; the stream knows why.
        hal_status_t latched = hal_stream_query(completion_->comm->hal_stream);
        const char *why = hal_last_error_message();
        if (latched != HAL_OK && latched != HAL_NOT_READY && why != nullptr && why[0] != '\0')
            message += std::string("; the communication stream failed with ") +
                       hal_status_string(latched) + ": " + why;
        hal_status_t error = completion_->comm->asyncError();
        if (error != HAL_OK && error != status)
            message += std::string("; the communicator reports ") + hal_status_string(error);
    }
    message += ")";
    throwDist(message);
}

bool WorkHAL::isCompleted()
{
    if (completion_->enqueue_error)
        return true;
    return query() != HAL_NOT_READY;
}

bool WorkHAL::isSuccess() const
{
    return !completion_->enqueue_error && query() == HAL_OK;
}

std::exception_ptr WorkHAL::exception() const
{
    if (completion_->enqueue_error)
        return completion_->enqueue_error;
    hal_status_t st = query();
    if (st == HAL_OK || st == HAL_NOT_READY)
        return nullptr;
    try {
        throwFailure(st, "hal_event_query");
    } catch (...) {
        return std::current_exception();
    }
    return nullptr;
}

std::vector<at::Tensor> WorkHAL::result()
{
    return outputs_;
}

void WorkHAL::synchronize()
{
    if (completion_->enqueue_error)
        std::rethrow_exception(completion_->enqueue_error);
    if (!completion_->comm)
        return;
    TORCH_CHECK(completion_->event != nullptr,
                "torch_hal process group: a Work of a coalesced group was waited for before "
                "endCoalescing()");
    // The caller's current stream waits for the collective (device side, no host block).
    checkComm(
        hal_stream_wait_event(currentHalStream(completion_->comm->device), completion_->event),
        "hal_stream_wait_event");
}

void WorkHAL::blockCurrentStream()
{
    synchronize();
}

bool WorkHAL::wait(std::chrono::milliseconds timeout)
{
    synchronize();
    if (!completion_->comm)
        return true;
    std::chrono::milliseconds limit = timeout.count() > 0 ? timeout : timeout_;
    hal_status_t st;
    if (limit.count() <= 0) {
        // Bounded by the communicator's timeout: a dead or stuck peer fails the collective.
        st = hal_event_synchronize(completion_->event);
    } else {
        auto deadline = std::chrono::steady_clock::now() + limit;
        auto pause = std::chrono::microseconds(20);
        for (;;) {
            st = hal_event_query(completion_->event);
            if (st != HAL_NOT_READY)
                break;
            if (std::chrono::steady_clock::now() >= deadline) {
                // As ProcessGroupNCCL's blocking wait: the communicator cannot be trusted with
                // a collective still pending, so it is aborted (every rank then fails fast).
                completion_->comm->abort();
                throwDist("torch_hal process group: " + completion_->what +
                          " did not complete within " + std::to_string(limit.count()) +
                          " ms (Work.wait timeout); the communicator was aborted");
            }
            std::this_thread::sleep_for(pause);
            pause = std::min(pause * 2, std::chrono::microseconds(1000));
        }
    }
    if (st != HAL_OK)
        throwFailure(st, "hal_event_synchronize");
    return true;
}

void WorkHAL::abort()
{
    if (completion_->comm)
        completion_->comm->abort();
}

c10::intrusive_ptr<c10::ivalue::Future> WorkHAL::getFuture()
{
    return future_;
}

// ---- Process group ------------------------------------------------------------------------------

ProcessGroupHAL::ProcessGroupHAL(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                                 std::chrono::milliseconds timeout, std::string group_name)
    : c10d::Backend(rank, size), store_(std::move(store)), timeout_(timeout),
      group_name_(std::move(group_name))
{
    TORCH_CHECK(isBackendOpen(), "torch_hal process group: no HAL backend is open");
    init();
}

ProcessGroupHAL::~ProcessGroupHAL()
{
    if (coalescing_.group_open && coalescing_.thread == std::this_thread::get_id())
        (void)hal_group_end();
    std::shared_ptr<CommState> comm = std::atomic_exchange(&comm_, std::shared_ptr<CommState>());
    if (comm)
        comm->close();
}

void ProcessGroupHAL::setTimeout(std::chrono::milliseconds timeout)
{
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    TORCH_CHECK(!std::atomic_load(&comm_),
                "torch_hal process group: the timeout is the HAL communicator's and cannot "
                "change once it exists (set it in init_process_group / new_group)");
    timeout_ = timeout;
}

std::chrono::milliseconds ProcessGroupHAL::opTimeout(std::chrono::milliseconds requested) const
{
    return requested.count() > 0 ? requested : std::chrono::milliseconds(0);
}

int ProcessGroupHAL::commDevice() const
{
    std::shared_ptr<CommState> comm = std::atomic_load(&comm_);
    return comm ? static_cast<int>(comm->device) : -1;
}

void ProcessGroupHAL::connect(c10::DeviceIndex device)
{
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    ensureComm(device);
}

void ProcessGroupHAL::keep(const at::Tensor &t)
{
    if (coalescing_.active)
        coalescing_.temporaries.push_back(t);
}

std::shared_ptr<CommState> ProcessGroupHAL::ensureComm(c10::DeviceIndex device)
{
    std::shared_ptr<CommState> existing = std::atomic_load(&comm_);
    if (existing) {
        TORCH_CHECK_VALUE(existing->device == device,
                          "torch_hal process group: the group's "
                          "communicator is on ",
                          deviceTypeName(), ":", static_cast<int>(existing->device),
                          ", but got a tensor on ", deviceTypeName(), ":", static_cast<int>(device),
                          ". Each rank uses one device: call torch.accelerator.set_device_index("
                          "local_rank) before the first collective.");
        return existing;
    }
    checkDevice(device);
    TORCH_CHECK(!coalescing_.group_open, "torch_hal process group: internal error: the "
                                         "communicator is created inside a HAL group");

    // The job's unique id: rank 0 makes it and publishes it in the process group's store.
    hal_unique_id_t id;
    const std::string key = "torch_hal/unique_id";
    const auto id_bytes = sizeof(id.internal);
    if (rank_ == 0) {
        checkComm(hal_comm_get_unique_id(HAL_COMM_ID_FLAG_STORE, &id), "hal_comm_get_unique_id");
        store_->set(key, std::vector<uint8_t>(id.internal, id.internal + id_bytes));
    } else {
        try {
            store_->wait({ key }, timeout_);
        } catch (const c10::Error &e) {
            throwDist("torch_hal process group: rank " + std::to_string(rank_) +
                      " did not get the communicator id from rank 0 through the store within " +
                      std::to_string(timeout_.count()) + " ms: " + e.what_without_backtrace());
        }
        std::vector<uint8_t> bytes = store_->get(key);
        TORCH_CHECK(bytes.size() == id_bytes, "torch_hal process group: the store holds ",
                    bytes.size(), " bytes under '", key, "', expected a ", id_bytes,
                    "-byte HAL unique id");
        std::memcpy(id.internal, bytes.data(), id_bytes);
    }

    c10::Stream stream = streamFromPool(device, /*high_priority=*/true);
    auto state = std::make_shared<CommState>(stream);
    state->device = device;
    state->hal_stream = halStream(stream);
    state->store = std::make_unique<StoreAdapter>();
    state->store->store = store_;
    TORCH_HAL_CHECK(hal_event_create(halDevice(device), HAL_EVENT_FLAG_NONE, &state->ready));

    auto store = halStruct<hal_comm_store_t>();
    store.user_data = state->store.get();
    store.set = &StoreAdapter::set;
    store.get = &StoreAdapter::get;
    auto config = halStruct<hal_comm_config_t>();
    const int64_t max_ms = std::numeric_limits<uint32_t>::max();
    config.timeout_ms = static_cast<uint32_t>(std::clamp<int64_t>(timeout_.count(), 1, max_ms));
    config.blocking = 1;
    config.store = &store;
    hal_status_t st = hal_comm_init(&id, size_, rank_, halDevice(device), &config, &state->comm);
    if (st != HAL_OK) {
        std::string message = halErrorMessage(st, "hal_comm_init");
        message += " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " on " +
                   deviceTypeName() + ":" + std::to_string(device) + ", timeout " +
                   std::to_string(config.timeout_ms) + " ms";
        std::lock_guard<std::mutex> lock(state->store->mutex);
        if (!state->store->last_error.empty())
            message += "; the store failed: " + state->store->last_error;
        throwDist(message + ")");
    }
    std::atomic_store(&comm_, state);
    return state;
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::run(c10d::OpType type, const char *what, c10::Device device,
                     const std::vector<at::Tensor> &inputs, const std::vector<at::Tensor> &outputs,
                     std::chrono::milliseconds timeout, const Enqueue &enqueue, const After &after)
{
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    const bool coalesced = coalescing_.active;
    if (coalesced) {
        TORCH_CHECK(coalescing_.thread == std::this_thread::get_id(),
                    "torch_hal process group: collectives of a coalesced group must be issued by "
                    "the thread that called startCoalescing()");
        if (coalescing_.device)
            TORCH_CHECK_VALUE(*coalescing_.device == device, "torch_hal process group: a "
                                                             "coalesced group uses one device");
        coalescing_.device = device;
    }
    std::shared_ptr<CommState> comm = ensureComm(device.index());
    c10::DeviceGuard device_guard(device);
    // The collectives below operate on raw tensors, outside autograd.
    at::AutoDispatchBelowADInplaceOrView below_autograd;

    // The communication stream waits for what the caller's stream has queued so far.
    TORCH_HAL_CHECK(hal_event_record(comm->ready, currentHalStream(device.index())));
    TORCH_HAL_CHECK(hal_stream_wait_event(comm->hal_stream, comm->ready));
    for (const at::Tensor &t : inputs)
        recordOnStream(t, comm->stream);
    for (const at::Tensor &t : outputs)
        recordOnStream(t, comm->stream);

    std::shared_ptr<Completion> completion =
        coalesced ? coalescing_.completion : std::make_shared<Completion>();
    completion->comm = comm;
    if (!coalesced)
        completion->what = what;
    auto future = makeFuture(device);
    {
        // Temporaries and copies of the collective go on the communication stream.
        c10::StreamGuard stream_guard(comm->stream);
        if (coalesced && !coalescing_.group_open) {
            checkComm(hal_group_begin(), "hal_group_begin");
            coalescing_.group_open = true;
        }
        enqueue(comm->comm, comm->hal_stream);
        if (coalesced) {
            if (after)
                coalescing_.after.push_back(after);
            coalescing_.outputs.insert(coalescing_.outputs.end(), outputs.begin(), outputs.end());
            coalescing_.inputs.insert(coalescing_.inputs.end(), inputs.begin(), inputs.end());
            coalescing_.futures.emplace_back(future, outputs);
        } else {
            if (after)
                after();
            completion->event = comm->takeEvent();
            TORCH_HAL_CHECK(hal_event_record(completion->event, comm->hal_stream));
            // As CUDA futures: complete now, with an event on the communication stream that
            // the streams of the future's users wait for.
            future->markCompleted(at::IValue(outputs));
        }
    }
    return c10::make_intrusive<WorkHAL>(rank_, type, std::move(completion), outputs,
                                        std::move(future), opTimeout(timeout));
}

// ---- Collectives --------------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::broadcast(std::vector<at::Tensor> &tensors,
                                                          const c10d::BroadcastOptions &opts)
{
    TORCH_CHECK_VALUE(!tensors.empty(), "torch_hal process group: broadcast of no tensors");
    TORCH_CHECK_VALUE(opts.rootTensor == 0, "torch_hal process group: rootTensor must be 0");
    TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_,
                      "torch_hal process group: invalid root rank ", opts.rootRank);
    c10::Device device = tensors[0].device();
    for (const at::Tensor &t : tensors) {
        checkDense(t, "the broadcast tensor");
        checkSameDevice(t, device, "a broadcast tensor");
    }
    const int root = static_cast<int>(opts.rootRank);
    return run(c10d::OpType::BROADCAST, "broadcast", device, tensors, tensors, opts.timeout,
               [&](hal_comm_t comm, hal_stream_t stream) {
                   grouped([&] {
                       for (const at::Tensor &t : tensors) {
                           Payload p = movePayload(t);
                           checkComm(
                               hal_broadcast(p.ptr, p.ptr, p.count, p.dtype, root, comm, stream),
                               "hal_broadcast");
                       }
                   });
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::allreduce(std::vector<at::Tensor> &tensors,
                                                          const c10d::AllreduceOptions &opts)
{
    TORCH_CHECK_VALUE(!tensors.empty(), "torch_hal process group: allreduce of no tensors");
    TORCH_CHECK_VALUE(!opts.sparseIndices.has_value(),
                      "torch_hal process group: sparse allreduce is not supported");
    c10::Device device = tensors[0].device();
    std::vector<at::Tensor> views;
    for (const at::Tensor &t : tensors) {
        checkDense(t, "the allreduce tensor");
        checkSameDevice(t, device, "an allreduce tensor");
        views.push_back(reducible(t, opts.reduceOp));
    }
    std::vector<hal_redop_t> ops;
    for (const at::Tensor &v : views)
        ops.push_back(halRedop(opts.reduceOp, v.scalar_type()));
    return run(c10d::OpType::ALLREDUCE, "allreduce", device, tensors, tensors, opts.timeout,
               [&](hal_comm_t comm, hal_stream_t stream) {
                   grouped([&] {
                       for (size_t i = 0; i < views.size(); ++i) {
                           Payload p = reducePayload(views[i]);
                           checkComm(
                               hal_allreduce(p.ptr, p.ptr, p.count, p.dtype, ops[i], comm, stream),
                               "hal_allreduce");
                       }
                   });
               });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::allreduce_coalesced(std::vector<at::Tensor> &tensors,
                                     const c10d::AllreduceCoalescedOptions &opts)
{
    // allreduce() already enqueues its tensors as one HAL group.
    c10d::AllreduceOptions single;
    single.reduceOp = opts.reduceOp;
    single.timeout = opts.timeout;
    single.asyncOp = opts.asyncOp;
    auto work = allreduce(tensors, single);
    return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::reduce(std::vector<at::Tensor> &tensors,
                                                       const c10d::ReduceOptions &opts)
{
    checkSingle(tensors, "reduce");
    TORCH_CHECK_VALUE(opts.rootTensor == 0, "torch_hal process group: rootTensor must be 0");
    TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_,
                      "torch_hal process group: invalid root rank ", opts.rootRank);
    checkDense(tensors[0], "the reduce tensor");
    at::Tensor view = reducible(tensors[0], opts.reduceOp);
    hal_redop_t op = halRedop(opts.reduceOp, view.scalar_type());
    const int root = static_cast<int>(opts.rootRank);
    return run(c10d::OpType::REDUCE, "reduce", view.device(), tensors, tensors, opts.timeout,
               [&](hal_comm_t comm, hal_stream_t stream) {
                   Payload p = reducePayload(view);
                   checkComm(hal_reduce(p.ptr, p.ptr, p.count, p.dtype, op, root, comm, stream),
                             "hal_reduce");
               });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                           std::vector<at::Tensor> &inputs, const c10d::AllgatherOptions &opts)
{
    checkSingle(inputs, "allgather");
    TORCH_CHECK_VALUE(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(size_),
                      "torch_hal process group: allgather needs one list of ", size_,
                      " output tensors");
    return allgather_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::allgather_coalesced(std::vector<std::vector<at::Tensor>> &output_lists,
                                     std::vector<at::Tensor> &inputs,
                                     const c10d::AllgatherOptions &opts)
{
    TORCH_CHECK_VALUE(!inputs.empty() && output_lists.size() == inputs.size(),
                      "torch_hal process group: allgather needs one output list per input");
    c10::Device device = inputs[0].device();
    for (size_t i = 0; i < inputs.size(); ++i) {
        checkContiguous(inputs[i], "the allgather input");
        checkSameDevice(inputs[i], device, "an allgather input");
        TORCH_CHECK_VALUE(output_lists[i].size() == static_cast<size_t>(size_),
                          "torch_hal process group: allgather needs ", size_,
                          " output tensors per input, got ", output_lists[i].size());
        for (const at::Tensor &o : output_lists[i]) {
            checkDeviceTensor(o, "an allgather output");
            checkSameDevice(o, device, "an allgather output");
            TORCH_CHECK_VALUE(o.numel() == inputs[i].numel() &&
                                  o.scalar_type() == inputs[i].scalar_type(),
                              "torch_hal process group: allgather outputs must have the input's "
                              "size and dtype");
        }
    }
    // Gathered into one flat temporary per input, then copied out (on the communication
    // stream, after the collective).
    auto flats = std::make_shared<std::vector<at::Tensor>>();
    std::vector<at::Tensor> all_outputs = flatten(output_lists);
    return run(
        c10d::OpType::ALLGATHER, "allgather", device, inputs, all_outputs, opts.timeout,
        [&](hal_comm_t comm, hal_stream_t stream) {
            for (const at::Tensor &in : inputs)
                flats->push_back(at::empty({ size_, in.numel() }, in.options()));
            grouped([&] {
                for (size_t i = 0; i < inputs.size(); ++i) {
                    Payload src = movePayload(inputs[i]);
                    checkComm(hal_allgather(src.ptr, (*flats)[i].data_ptr(), src.count, src.dtype,
                                            comm, stream),
                              "hal_allgather");
                }
            });
        },
        [flats, output_lists] {
            for (size_t i = 0; i < output_lists.size(); ++i)
                for (size_t r = 0; r < output_lists[i].size(); ++r)
                    output_lists[i][r].copy_(
                        (*flats)[i][static_cast<int64_t>(r)].view(output_lists[i][r].sizes()));
        });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::_allgather_base(at::Tensor &output,
                                                                at::Tensor &input,
                                                                const c10d::AllgatherOptions &opts)
{
    std::vector<at::Tensor> outputs{ output }, inputs{ input };
    return allgather_into_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::allgather_into_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                                 std::vector<at::Tensor> &inputs,
                                                 const c10d::AllgatherOptions &opts)
{
    TORCH_CHECK_VALUE(!inputs.empty() && outputs.size() == inputs.size(),
                      "torch_hal process group: all_gather_into_tensor needs one output per "
                      "input");
    c10::Device device = inputs[0].device();
    for (size_t i = 0; i < inputs.size(); ++i) {
        checkContiguous(inputs[i], "the all_gather_into_tensor input");
        checkContiguous(outputs[i], "the all_gather_into_tensor output");
        checkSameDevice(inputs[i], device, "an all_gather_into_tensor input");
        checkSameDevice(outputs[i], device, "an all_gather_into_tensor output");
        TORCH_CHECK_VALUE(outputs[i].scalar_type() == inputs[i].scalar_type(),
                          "torch_hal process group: all_gather_into_tensor output and input "
                          "dtypes differ");
        TORCH_CHECK_VALUE(outputs[i].numel() == inputs[i].numel() * size_,
                          "torch_hal process group: all_gather_into_tensor output must have "
                          "world_size (",
                          size_, ") times the input's elements, got ", outputs[i].numel(),
                          " for an input of ", inputs[i].numel());
    }
    return run(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", device, inputs, outputs,
               opts.timeout, [&](hal_comm_t comm, hal_stream_t stream) {
                   grouped([&] {
                       for (size_t i = 0; i < inputs.size(); ++i) {
                           Payload src = movePayload(inputs[i]);
                           checkComm(hal_allgather(src.ptr, outputs[i].data_ptr(), src.count,
                                                   src.dtype, comm, stream),
                                     "hal_allgather");
                       }
                   });
               });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::reduce_scatter(std::vector<at::Tensor> &outputs,
                                std::vector<std::vector<at::Tensor>> &inputs,
                                const c10d::ReduceScatterOptions &opts)
{
    checkSingle(outputs, "reduce_scatter");
    TORCH_CHECK_VALUE(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_),
                      "torch_hal process group: reduce_scatter needs one list of ", size_,
                      " input tensors");
    at::Tensor output = outputs[0];
    checkContiguous(output, "the reduce_scatter output");
    c10::Device device = output.device();
    for (const at::Tensor &in : inputs[0]) {
        checkDeviceTensor(in, "a reduce_scatter input");
        checkSameDevice(in, device, "a reduce_scatter input");
        TORCH_CHECK_VALUE(in.numel() == output.numel() && in.scalar_type() == output.scalar_type(),
                          "torch_hal process group: reduce_scatter inputs must have the output's "
                          "size and dtype");
    }
    at::Tensor out_view = reducible(output, opts.reduceOp);
    hal_redop_t op = halRedop(opts.reduceOp, out_view.scalar_type());
    std::vector<at::Tensor> input_list = inputs[0];
    return run(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", device, input_list, outputs,
               opts.timeout, [&](hal_comm_t comm, hal_stream_t stream) {
                   // The inputs are packed into one flat temporary first (on this stream).
                   at::Tensor flat = at::empty({ size_, output.numel() }, output.options());
                   for (int r = 0; r < size_; ++r)
                       flat[r].copy_(input_list[static_cast<size_t>(r)].reshape({ -1 }));
                   keep(flat);
                   at::Tensor flat_view = reducible(flat, opts.reduceOp);
                   Payload dst = reducePayload(out_view);
                   checkComm(hal_reduce_scatter(flat_view.data_ptr(), dst.ptr, dst.count, dst.dtype,
                                                op, comm, stream),
                             "hal_reduce_scatter");
               });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::_reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                      const c10d::ReduceScatterOptions &opts)
{
    std::vector<at::Tensor> outputs{ output }, inputs{ input };
    return reduce_scatter_tensor_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::reduce_scatter_tensor_coalesced(std::vector<at::Tensor> &outputs,
                                                 std::vector<at::Tensor> &inputs,
                                                 const c10d::ReduceScatterOptions &opts)
{
    TORCH_CHECK_VALUE(!inputs.empty() && outputs.size() == inputs.size(),
                      "torch_hal process group: reduce_scatter_tensor needs one output per input");
    c10::Device device = outputs[0].device();
    std::vector<at::Tensor> in_views, out_views;
    std::vector<hal_redop_t> ops;
    for (size_t i = 0; i < inputs.size(); ++i) {
        checkContiguous(inputs[i], "the reduce_scatter_tensor input");
        checkContiguous(outputs[i], "the reduce_scatter_tensor output");
        checkSameDevice(inputs[i], device, "a reduce_scatter_tensor input");
        checkSameDevice(outputs[i], device, "a reduce_scatter_tensor output");
        TORCH_CHECK_VALUE(outputs[i].scalar_type() == inputs[i].scalar_type(),
                          "torch_hal process group: reduce_scatter_tensor output and input "
                          "dtypes differ");
        TORCH_CHECK_VALUE(inputs[i].numel() == outputs[i].numel() * size_,
                          "torch_hal process group: reduce_scatter_tensor input must have "
                          "world_size (",
                          size_, ") times the output's elements, got ", inputs[i].numel(),
                          " for an output of ", outputs[i].numel());
        in_views.push_back(reducible(inputs[i], opts.reduceOp));
        out_views.push_back(reducible(outputs[i], opts.reduceOp));
        ops.push_back(halRedop(opts.reduceOp, out_views.back().scalar_type()));
    }
    return run(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", device, inputs, outputs,
               opts.timeout, [&](hal_comm_t comm, hal_stream_t stream) {
                   grouped([&] {
                       for (size_t i = 0; i < in_views.size(); ++i) {
                           Payload dst = reducePayload(out_views[i]);
                           checkComm(hal_reduce_scatter(in_views[i].data_ptr(), dst.ptr, dst.count,
                                                        dst.dtype, ops[i], comm, stream),
                                     "hal_reduce_scatter");
                       }
                   });
               });
}

namespace
{

// Elements per index of dimension 0.
int64_t rowElements(const at::Tensor &t)
{
    if (t.dim() == 0)
        return 1;
    int64_t n = 1;
    for (int64_t d = 1; d < t.dim(); ++d)
        n *= t.size(d);
    return n;
}

size_t unitsPerElement(const at::Tensor &t, const Payload &p)
{
    return t.numel() == 0 ? 1 : p.count / static_cast<size_t>(t.numel());
}

// Split sizes along dimension 0 (an empty list: equal splits), checked against the tensor.
std::vector<int64_t> splits(const std::vector<int64_t> &given, const at::Tensor &t, int size,
                            const char *what)
{
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    if (given.empty()) {
        TORCH_CHECK_VALUE(rows % size == 0, "torch_hal process group: all_to_all ", what, " has ",
                          rows, " rows, not divisible by the world size ", size);
        return std::vector<int64_t>(static_cast<size_t>(size), rows / size);
    }
    TORCH_CHECK_VALUE(given.size() == static_cast<size_t>(size), "torch_hal process group: ", what,
                      " split sizes must have world_size (", size, ") entries, got ", given.size());
    int64_t total = 0;
    for (int64_t s : given) {
        TORCH_CHECK_VALUE(s >= 0, "torch_hal process group: negative split size");
        total += s;
    }
    TORCH_CHECK_VALUE(total == rows, "torch_hal process group: ", what, " split sizes add up to ",
                      total, ", but dimension 0 has ", rows);
    return given;
}

} // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::alltoall_base(
    at::Tensor &output, at::Tensor &input, std::vector<int64_t> &output_split_sizes,
    std::vector<int64_t> &input_split_sizes, const c10d::AllToAllOptions &opts)
{
    checkContiguous(input, "the all_to_all input");
    checkContiguous(output, "the all_to_all output");
    c10::Device device = input.device();
    checkSameDevice(output, device, "the all_to_all output");
    TORCH_CHECK_VALUE(input.scalar_type() == output.scalar_type(),
                      "torch_hal process group: all_to_all output and input dtypes differ");
    const bool equal = output_split_sizes.empty() && input_split_sizes.empty();
    std::vector<at::Tensor> inputs{ input }, outputs{ output };
    if (equal) {
        TORCH_CHECK_VALUE(input.numel() == output.numel() && input.numel() % size_ == 0,
                          "torch_hal process group: all_to_all with equal splits needs input "
                          "and output of the same size, divisible by the world size");
        return run(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", device, inputs, outputs,
                   opts.timeout, [&](hal_comm_t comm, hal_stream_t stream) {
                       Payload src = movePayload(input);
                       checkComm(hal_alltoall(src.ptr, output.data_ptr(), src.count / size_,
                                              src.dtype, comm, stream),
                                 "hal_alltoall");
                   });
    }
    // Unequal splits: one HAL group of sends and receives, one pair per peer.
    std::vector<int64_t> in_splits = splits(input_split_sizes, input, size_, "input");
    std::vector<int64_t> out_splits = splits(output_split_sizes, output, size_, "output");
    const int64_t in_row = rowElements(input), out_row = rowElements(output);
    return run(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", device, inputs, outputs,
               opts.timeout, [&](hal_comm_t comm, hal_stream_t stream) {
                   Payload in = movePayload(input), out = movePayload(output);
                   // HAL elements per tensor element: 1, or the element size when the payload
                   // moves bytes.
                   const size_t in_unit = unitsPerElement(input, in);
                   const size_t out_unit = unitsPerElement(output, out);
                   auto *src = static_cast<char *>(in.ptr);
                   auto *dst = static_cast<char *>(out.ptr);
                   grouped([&] {
                       int64_t in_off = 0, out_off = 0;
                       for (int r = 0; r < size_; ++r) {
                           const int64_t n_in = in_splits[static_cast<size_t>(r)] * in_row;
                           const int64_t n_out = out_splits[static_cast<size_t>(r)] * out_row;
                           if (n_in > 0)
                               checkComm(hal_send(src + in_off * input.element_size(),
                                                  static_cast<size_t>(n_in) * in_unit, in.dtype, r,
                                                  comm, stream),
                                         "hal_send");
                           if (n_out > 0)
                               checkComm(hal_recv(dst + out_off * output.element_size(),
                                                  static_cast<size_t>(n_out) * out_unit, out.dtype,
                                                  r, comm, stream),
                                         "hal_recv");
                           in_off += n_in;
                           out_off += n_out;
                       }
                   });
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::alltoall(std::vector<at::Tensor> &outputs,
                                                         std::vector<at::Tensor> &inputs,
                                                         const c10d::AllToAllOptions &opts)
{
    TORCH_CHECK_VALUE(outputs.size() == static_cast<size_t>(size_) &&
                          inputs.size() == static_cast<size_t>(size_),
                      "torch_hal process group: all_to_all needs world_size (", size_,
                      ") input and output tensors");
    c10::Device device = inputs[0].device();
    for (int r = 0; r < size_; ++r) {
        const at::Tensor &in = inputs[static_cast<size_t>(r)];
        const at::Tensor &out = outputs[static_cast<size_t>(r)];
        checkContiguous(in, "an all_to_all input");
        checkContiguous(out, "an all_to_all output");
        checkSameDevice(in, device, "an all_to_all input");
        checkSameDevice(out, device, "an all_to_all output");
        TORCH_CHECK_VALUE(in.scalar_type() == out.scalar_type(),
                          "torch_hal process group: all_to_all output and input dtypes differ");
    }
    return run(
        c10d::OpType::ALLTOALL, "all_to_all", device, inputs, outputs, opts.timeout,
        [&](hal_comm_t comm, hal_stream_t stream) {
            grouped([&] {
                for (int r = 0; r < size_; ++r) {
                    const at::Tensor &in = inputs[static_cast<size_t>(r)];
                    const at::Tensor &out = outputs[static_cast<size_t>(r)];
                    if (in.numel() > 0) {
                        Payload p = movePayload(in);
                        checkComm(hal_send(p.ptr, p.count, p.dtype, r, comm, stream), "hal_send");
                    }
                    if (out.numel() > 0) {
                        Payload p = movePayload(out);
                        checkComm(hal_recv(p.ptr, p.count, p.dtype, r, comm, stream), "hal_recv");
                    }
                }
            });
        });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::gather(std::vector<std::vector<at::Tensor>> &outputs,
                        std::vector<at::Tensor> &inputs, const c10d::GatherOptions &opts)
{
    checkSingle(inputs, "gather");
    TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_,
                      "torch_hal process group: invalid root rank ", opts.rootRank);
    const int root = static_cast<int>(opts.rootRank);
    const at::Tensor &input = inputs[0];
    checkContiguous(input, "the gather input");
    c10::Device device = input.device();
    std::vector<at::Tensor> gathered;
    if (rank_ == root) {
        TORCH_CHECK_VALUE(outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(size_),
                          "torch_hal process group: gather needs one list of ", size_,
                          " output tensors on the root");
        gathered = outputs[0];
        for (const at::Tensor &o : gathered) {
            checkContiguous(o, "a gather output");
            checkSameDevice(o, device, "a gather output");
            TORCH_CHECK_VALUE(o.numel() == input.numel() && o.scalar_type() == input.scalar_type(),
                              "torch_hal process group: gather outputs must have the input's "
                              "size and dtype");
        }
    } else {
        TORCH_CHECK_VALUE(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                          "torch_hal process group: gather outputs are given only on the root");
    }
    return run(
        c10d::OpType::GATHER, "gather", device, inputs, gathered, opts.timeout,
        [&](hal_comm_t comm, hal_stream_t stream) {
            Payload in = movePayload(input);
            grouped([&] {
                checkComm(hal_send(in.ptr, in.count, in.dtype, root, comm, stream), "hal_send");
                for (int r = 0; r < static_cast<int>(gathered.size()); ++r) {
                    Payload out = movePayload(gathered[static_cast<size_t>(r)]);
                    checkComm(hal_recv(out.ptr, out.count, out.dtype, r, comm, stream), "hal_recv");
                }
            });
        });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupHAL::scatter(std::vector<at::Tensor> &outputs,
                         std::vector<std::vector<at::Tensor>> &inputs,
                         const c10d::ScatterOptions &opts)
{
    checkSingle(outputs, "scatter");
    TORCH_CHECK_VALUE(opts.rootRank >= 0 && opts.rootRank < size_,
                      "torch_hal process group: invalid root rank ", opts.rootRank);
    const int root = static_cast<int>(opts.rootRank);
    const at::Tensor &output = outputs[0];
    checkContiguous(output, "the scatter output");
    c10::Device device = output.device();
    std::vector<at::Tensor> pieces;
    if (rank_ == root) {
        TORCH_CHECK_VALUE(inputs.size() == 1 && inputs[0].size() == static_cast<size_t>(size_),
                          "torch_hal process group: scatter needs one list of ", size_,
                          " input tensors on the root");
        pieces = inputs[0];
        for (const at::Tensor &p : pieces) {
            checkContiguous(p, "a scatter input");
            checkSameDevice(p, device, "a scatter input");
            TORCH_CHECK_VALUE(p.numel() == output.numel() &&
                                  p.scalar_type() == output.scalar_type(),
                              "torch_hal process group: scatter inputs must have the output's "
                              "size and dtype");
        }
    } else {
        TORCH_CHECK_VALUE(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                          "torch_hal process group: scatter inputs are given only on the root");
    }
    return run(
        c10d::OpType::SCATTER, "scatter", device, pieces, outputs, opts.timeout,
        [&](hal_comm_t comm, hal_stream_t stream) {
            Payload out = movePayload(output);
            grouped([&] {
                for (int r = 0; r < static_cast<int>(pieces.size()); ++r) {
                    Payload in = movePayload(pieces[static_cast<size_t>(r)]);
                    checkComm(hal_send(in.ptr, in.count, in.dtype, r, comm, stream), "hal_send");
                }
                checkComm(hal_recv(out.ptr, out.count, out.dtype, root, comm, stream), "hal_recv");
            });
        });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::send(std::vector<at::Tensor> &tensors, int dst_rank,
                                                     int /*tag*/)
{
    checkSingle(tensors, "send");
    checkContiguous(tensors[0], "the send tensor");
    TORCH_CHECK_VALUE(dst_rank >= 0 && dst_rank < size_,
                      "torch_hal process group: invalid destination rank ", dst_rank);
    const at::Tensor &t = tensors[0];
    return run(c10d::OpType::SEND, "send", t.device(), tensors, {}, c10d::kUnsetTimeout,
               [&](hal_comm_t comm, hal_stream_t stream) {
                   Payload p = movePayload(t);
                   checkComm(hal_send(p.ptr, p.count, p.dtype, dst_rank, comm, stream), "hal_send");
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::recv(std::vector<at::Tensor> &tensors, int src_rank,
                                                     int /*tag*/)
{
    checkSingle(tensors, "recv");
    checkContiguous(tensors[0], "the recv tensor");
    TORCH_CHECK_VALUE(src_rank >= 0 && src_rank < size_,
                      "torch_hal process group: invalid source rank ", src_rank);
    const at::Tensor &t = tensors[0];
    return run(c10d::OpType::RECV, "recv", t.device(), {}, tensors, c10d::kUnsetTimeout,
               [&](hal_comm_t comm, hal_stream_t stream) {
                   Payload p = movePayload(t);
                   checkComm(hal_recv(p.ptr, p.count, p.dtype, src_rank, comm, stream), "hal_recv");
               });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::recvAnysource(std::vector<at::Tensor> & /*tensors*/,
                                                              int /*tag*/)
{
    notImplemented("torch_hal process group: recv from any source is not supported (HAL "
                   "point-to-point names its peer)");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::barrier(const c10d::BarrierOptions &opts)
{
    c10::DeviceIndex index = -1;
    if (opts.device.has_value() && opts.device->type() == kDeviceType && opts.device->has_index())
        index = opts.device->index();
    else if (!opts.device_ids.empty())
        index = static_cast<c10::DeviceIndex>(opts.device_ids[0]);
    else if (std::shared_ptr<CommState> comm = std::atomic_load(&comm_))
        index = comm->device;
    else if (bound_device_id_.has_value() && bound_device_id_->type() == kDeviceType)
        index = bound_device_id_->index();
    else
        index = currentDevice();
    return run(c10d::OpType::BARRIER, "barrier", c10::Device(kDeviceType, index), {}, {},
               opts.timeout, [](hal_comm_t comm, hal_stream_t stream) {
                   checkComm(hal_barrier(comm, stream), "hal_barrier");
               });
}

// ---- Coalescing ---------------------------------------------------------------------------------

void ProcessGroupHAL::startCoalescing()
{
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    TORCH_CHECK(!coalescing_.active,
                "torch_hal process group: startCoalescing() while a coalesced group is open");
    coalescing_ = Coalescing{};
    coalescing_.active = true;
    coalescing_.thread = std::this_thread::get_id();
    coalescing_.completion = std::make_shared<Completion>();
    coalescing_.completion->what = "coalesced collectives";
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHAL::endCoalescing()
{
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    TORCH_CHECK(coalescing_.active,
                "torch_hal process group: endCoalescing() without startCoalescing()");
    TORCH_CHECK(coalescing_.thread == std::this_thread::get_id(),
                "torch_hal process group: endCoalescing() on another thread than "
                "startCoalescing()");
    Coalescing c = std::move(coalescing_);
    coalescing_ = Coalescing{};
    if (!c.group_open) { // nothing was issued
        auto future =
            c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
        future->markCompleted(at::IValue(std::vector<at::Tensor>{}));
        return c10::make_intrusive<WorkHAL>(rank_, c10d::OpType::COALESCED, c.completion,
                                            std::vector<at::Tensor>{}, std::move(future),
                                            std::chrono::milliseconds(0));
    }
    std::shared_ptr<CommState> comm = c.completion->comm;
    c10::Device device = *c.device;
    c10::DeviceGuard device_guard(device);
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    c10::StreamGuard stream_guard(comm->stream);
    hal_status_t st = hal_group_end();
    if (st != HAL_OK) {
        auto error = std::make_exception_ptr(distError(halErrorMessage(st, "hal_group_end")));
        c.completion->enqueue_error = error;
        for (auto &f : c.futures)
            f.first->setError(error);
        std::rethrow_exception(error);
    }
    for (const After &after : c.after)
        after();
    // Tensors freed from now on stay reserved until the group's work is done.
    for (const at::Tensor &t : c.inputs)
        recordOnStream(t, comm->stream);
    for (const at::Tensor &t : c.outputs)
        recordOnStream(t, comm->stream);
    c.completion->event = comm->takeEvent();
    TORCH_HAL_CHECK(hal_event_record(c.completion->event, comm->hal_stream));
    for (auto &f : c.futures)
        f.first->markCompleted(at::IValue(f.second));
    auto future = makeFuture(device);
    future->markCompleted(at::IValue(c.outputs));
    return c10::make_intrusive<WorkHAL>(rank_, c10d::OpType::COALESCED, c.completion, c.outputs,
                                        std::move(future), std::chrono::milliseconds(0));
}

// ---- Lifetime -----------------------------------------------------------------------------------

void ProcessGroupHAL::abort()
{
    // Safe while another thread is blocked in the communicator: no lock.
    if (std::shared_ptr<CommState> comm = std::atomic_load(&comm_))
        comm->abort();
}

void ProcessGroupHAL::shutdown()
{
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    std::shared_ptr<CommState> comm = std::atomic_exchange(&comm_, std::shared_ptr<CommState>());
    if (comm)
        comm->close();
}

c10d::ErrorType ProcessGroupHAL::getError()
{
    std::shared_ptr<CommState> comm = std::atomic_load(&comm_);
    switch (comm ? comm->asyncError() : HAL_OK) {
    case HAL_OK:
        return c10d::ErrorType::SUCCESS;
    case HAL_ERROR_TIMEOUT:
        return c10d::ErrorType::TIMEOUT;
    case HAL_ERROR_REMOTE:
        return c10d::ErrorType::REMOTE_ERROR;
    default:
        return c10d::ErrorType::COMM_ERROR;
    }
}

} // namespace torch_hal
