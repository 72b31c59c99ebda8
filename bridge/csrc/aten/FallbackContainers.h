// SPDX-License-Identifier: Apache-2.0
// Small containers for one fallback call (Fallback.cpp): the storages and devices a call
// touches, without a heap allocation for the usual few.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace torch_hal
{

// A map from storage to value for the few storages one call touches: searched linearly while
// small, so that a call allocates no hash table; hashed once it grows (long tensor lists).
template <typename Value> class StorageMap
{
  public:
    // The value of `key`, or nullptr; valid until the next insert.
    Value *find(const c10::StorageImpl *key)
    {
        if (!hashed_.empty()) {
            auto it = hashed_.find(key);
            return it == hashed_.end() ? nullptr : &it->second;
        }
        for (auto &entry : linear_)
            if (entry.first == key)
                return &entry.second;
        return nullptr;
    }

    void insert(const c10::StorageImpl *key, Value value)
    {
        if (hashed_.empty() && linear_.size() < kLinearEntries) {
            linear_.emplace_back(key, std::move(value));
            return;
        }
        if (hashed_.empty()) {
            for (auto &entry : linear_)
                hashed_.emplace(entry.first, std::move(entry.second));
            linear_.clear();
        }
        hashed_.emplace(key, std::move(value));
    }

  private:
    static constexpr size_t kLinearEntries = 16;
    c10::SmallVector<std::pair<const c10::StorageImpl *, Value>, 4> linear_;
    std::unordered_map<const c10::StorageImpl *, Value> hashed_;
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
