// SPDX-License-Identifier: Apache-2.0
// The torch_hal process group's communicator and how it is made: rank 0 makes the HAL unique id
// and publishes it in the process group's store, then every rank joins with hal_comm_init
// through the same store (StoreAdapter: hal_comm_store_t over c10d::Store).
#include "distributed/ProcessGroupHALInternal.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <thread>

namespace torch_hal
{

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

// ---- The communicator ---------------------------------------------------------------------------

CommState::CommState(c10::Stream s) : stream(s) {}

CommState::~CommState()
{
    close();
    for (hal_event_t e : pool)
        TORCH_HAL_WARN_ON_ERROR(hal_event_destroy(e));
    if (ready != nullptr)
        TORCH_HAL_WARN_ON_ERROR(hal_event_destroy(ready));
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

} // namespace torch_hal
