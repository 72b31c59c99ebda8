// SPDX-License-Identifier: Apache-2.0
// The fallback's reusable CPU stand-ins (FallbackStandIns.h).
#include "aten/FallbackStandIns.h"

#include <ATen/core/TensorBody.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>

#include <typeinfo>

namespace torch_hal
{
namespace
{

// Enough for the lists of a _foreach_* operator on a model's parameters (one call takes a
// whole list): about 300 bytes each.
constexpr size_t kKeptPerThread = 256;

} // namespace

StandInPool *standInPool()
{
    thread_local StandInPool pool;
    return c10::InferenceMode::is_enabled() ? nullptr : &pool;
}

at::Tensor aliasingStandIn(StandInPool *pool, void *data, size_t nbytes, c10::Allocator *allocator,
                           bool resizable, caffe2::TypeMeta dtype, c10::IntArrayRef sizes,
                           c10::IntArrayRef strides, int64_t storage_offset)
{
    at::Tensor stand_in;
    if (pool != nullptr && !pool->kept.empty()) {
        stand_in = std::move(pool->kept.back());
        pool->kept.pop_back();
        c10::TensorImpl *impl = stand_in.unsafeGetTensorImpl();
        c10::StorageImpl *storage = impl->unsafe_storage().unsafeGetStorageImpl();
        storage->set_data_ptr_noswap(c10::DataPtr(data, c10::Device(c10::DeviceType::CPU)));
        storage->set_nbytes(nbytes);
        storage->set_allocator(allocator);
        storage->set_resizable(resizable);
        impl->set_storage_and_dtype(impl->unsafe_storage(), dtype);
    } else {
        auto storage = c10::make_intrusive<c10::StorageImpl>(
            c10::StorageImpl::use_byte_size_t(), nbytes,
            c10::DataPtr(data, c10::Device(c10::DeviceType::CPU)), allocator, resizable);
        stand_in = at::detail::make_tensor<c10::TensorImpl>(
            c10::Storage(std::move(storage)), c10::DispatchKeySet(c10::DispatchKey::CPU), dtype);
        if (pool != nullptr)
            pool->new_keys = stand_in.key_set();
    }
    stand_in.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, storage_offset);
    return stand_in;
}

void recycleStandIn(StandInPool *pool, at::Tensor &&stand_in)
{
    at::Tensor released = std::move(stand_in);
    if (pool == nullptr || pool->kept.size() >= kKeptPerThread || !released.defined())
        return;
    const c10::TensorImpl *impl = released.unsafeGetTensorImpl();
    if (!impl->has_storage())
        return;
    const c10::Storage &storage = impl->unsafe_storage();
    // Only what aliasingStandIn made, as it made it, with no one else holding either part: the
    // kernel may have kept the storage (a view it returned), resized or replaced it (out=), or
    // changed the tensor's flags.
    bool plain = typeid(*impl) == typeid(c10::TensorImpl) &&
                 typeid(*storage.unsafeGetStorageImpl()) == typeid(c10::StorageImpl) &&
                 released.use_count() == 1 && released.weak_use_count() == 1 &&
                 storage.use_count() == 1 &&
                 storage.getWeakStorageImpl().weak_use_count() == 2 && // with this one
                 !storage.data_ptr().get_context() && impl->key_set() == pool->new_keys &&
                 impl->allow_tensor_metadata_change() && !impl->is_wrapped_number() &&
                 !impl->is_conj() && !impl->is_neg();
    if (plain)
        pool->kept.push_back(std::move(released));
}

} // namespace torch_hal
