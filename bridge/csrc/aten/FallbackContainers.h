// SPDX-License-Identifier: Apache-2.0
// Small containers for one fallback call (Fallback.cpp): the storages and devices a call
// touches, without a heap allocation for the usual few.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace torch_hal
{

// A map from storage to value for the storages one call touches: searched linearly while small,
// so that a call allocates nothing; past that (the lists of a _foreach_* operator), an
// open-addressing table in one allocation, not a node per entry. Keys are inserted once.
template <typename Value> class StorageMap
{
  public:
    // The value of `key`, or nullptr; valid until the next insert.
    Value *find(const c10::StorageImpl *key)
    {
        if (slots_.empty()) {
            for (auto &entry : linear_)
                if (entry.first == key)
                    return &entry.second;
            return nullptr;
        }
        const size_t mask = slots_.size() - 1;
        for (size_t i = slotOf(key, mask);; i = (i + 1) & mask) {
            if (slots_[i].first == key)
                return &slots_[i].second;
            if (slots_[i].first == nullptr)
                return nullptr;
        }
    }

    // Adds `key`, which the map does not hold.
    void insert(const c10::StorageImpl *key, Value value)
    {
        if (slots_.empty() && linear_.size() < kLinearEntries) {
            linear_.emplace_back(key, std::move(value));
            return;
        }
        if (2 * (count_ + 1) > slots_.size())
            grow();
        place(key, std::move(value));
    }

  private:
    using Entry = std::pair<const c10::StorageImpl *, Value>;

    static size_t slotOf(const c10::StorageImpl *key, size_t mask)
    {
        // Fibonacci hashing: allocations are aligned, so the low bits alone would collide.
        const auto bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(key));
        return static_cast<size_t>((bits * 0x9E3779B97F4A7C15ULL) >> 32) & mask;
    }

    void place(const c10::StorageImpl *key, Value value)
    {
        const size_t mask = slots_.size() - 1;
        size_t i = slotOf(key, mask);
        while (slots_[i].first != nullptr)
            i = (i + 1) & mask;
        slots_[i] = Entry(key, std::move(value));
        ++count_;
    }

    void grow()
    {
        std::vector<Entry> previous(std::max<size_t>(64, 2 * slots_.size()));
        previous.swap(slots_); // slots_ is now the larger, empty table
        count_ = 0;
        for (auto &entry : linear_)
            place(entry.first, std::move(entry.second));
        linear_.clear();
        for (auto &entry : previous)
            if (entry.first != nullptr)
                place(entry.first, std::move(entry.second));
    }

    static constexpr size_t kLinearEntries = 16;
    c10::SmallVector<Entry, 4> linear_;
    std::vector<Entry> slots_; // empty, or a power of two of them, at most half full
    size_t count_ = 0;
};

// A few device indices, each once (a call's devices: one, or two for cross-device copies).
class DeviceSet
{
  public:
    void insert(c10::DeviceIndex index)
    {
        if (std::find(indices_.begin(), indices_.end(), index) == indices_.end())
            indices_.push_back(index);
    }
    bool empty() const
    {
        return indices_.empty();
    }
    const c10::DeviceIndex *begin() const
    {
        return indices_.begin();
    }
    const c10::DeviceIndex *end() const
    {
        return indices_.end();
    }

  private:
    c10::SmallVector<c10::DeviceIndex, 2> indices_;
};

} // namespace torch_hal
