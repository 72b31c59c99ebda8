// SPDX-License-Identifier: Apache-2.0
// bernoulli_(p) with a constant p on the device: the CPU kernel's values, drawn in blocks.
//
// Without this kernel the fallback runs the CPU's bernoulli_ with the device generator lent.
// That kernel (templates::cpu::bernoulli_kernel, aten/src/ATen/native/cpu/
// DistributionTemplates.h) draws one element at a time: a 64-bit number from the mt19937 engine
// (two 32-bit outputs, the first the high half), its low 53 bits times 2^-53 compared with p.
// That is about 5 ns per element, 170 us for a dropout mask of 32768 elements; the compiled path
// draws each mask outside its program this way (stablehlo_dropout.py), a dozen per training step
// of the demo model. Here the engine's outputs are made a block at a time, four words per
// operation, and compared with p as integers: the same numbers in the same order, the same
// results, the generator left in the state the CPU kernel leaves it in, in about a quarter of
// the time (45 against 165 us for such a mask).
//
// The first draw compares this kernel with the CPU's on a generator of its own. Where they differ
// the fallback runs the CPU's kernel from then on: PyTorch built with MKL draws with MKL's VSL
// on an Intel CPU (bernoulli_scalar_kernel in DistributionKernels.cpp), and a later torch may
// change its kernel. The fallback also takes non-contiguous tensors, generators of another
// device and p outside [0, 1].
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/MT19937RNGEngine.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "aten/Common.h"
#include "runtime/Allocator.h"
#include "runtime/Register.h"

namespace torch_hal
{
namespace
{

constexpr int kStateN = at::MERSENNE_STATE_N; // 624
constexpr int kStateM = at::MERSENNE_STATE_M; // 397

// Four engine words at a time (SSE2 or NEON; GCC's and Clang's vector extension).
typedef uint32_t Words4 __attribute__((vector_size(16)));

inline Words4 load4(const uint32_t *p)
{
    Words4 v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

inline void store4(uint32_t *p, Words4 v)
{
    std::memcpy(p, &v, sizeof(v));
}

// mt19937_engine's twist and tempering, for one word (uint32_t) or four (Words4).
template <typename W> W twist(W u, W v)
{
    return (((u & at::UMASK) | (v & at::LMASK)) >> 1) ^ ((0u - (v & 1u)) & at::MATRIX_A);
}

template <typename W> W temper(W y)
{
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

// mt19937_engine::next_state, four words at a time. Word i becomes s[i + M] (i < N - M: a word
// not yet replaced; after that s[i + M - N], one already replaced, as in the original's walk)
// xor twist(s[i], s[i + 1]) with s[i + 1] not yet replaced: the same in any group of four.
void nextState(uint32_t *s)
{
    int i = 0;
    for (; i + 4 <= kStateN - kStateM; i += 4)
        store4(s + i, load4(s + i + kStateM) ^ twist(load4(s + i), load4(s + i + 1)));
    for (; i < kStateN - kStateM; ++i)
        s[i] = s[i + kStateM] ^ twist(s[i], s[i + 1]);
    for (; i + 4 <= kStateN - 1; i += 4)
        store4(s + i, load4(s + i + kStateM - kStateN) ^ twist(load4(s + i), load4(s + i + 1)));
    for (; i < kStateN - 1; ++i)
        s[i] = s[i + kStateM - kStateN] ^ twist(s[i], s[i + 1]);
    s[kStateN - 1] = s[kStateM - 1] ^ twist(s[kStateN - 1], s[0]);
}

// mt19937_engine::operator()'s tempering of n state words.
void temperWords(const uint32_t *s, uint32_t *out, int n)
{
    int i = 0;
    for (; i + 4 <= n; i += 4)
        store4(out + i, temper(load4(s + i)));
    for (; i < n; ++i)
        out[i] = temper(s[i]);
}

// The engine's next `count` outputs into out, the engine advanced past them: what `count` calls
// of mt19937_engine::operator() return and leave. The engine's data: it twists when a call
// finds left_ decremented to 0, then returns state_[next_++]; so left_ - 1 outputs remain
// from state_[next_] before the next twist.
void engineOutputs(at::mt19937_data_pod &d, uint32_t *out, int64_t count)
{
    while (count > 0) {
        int64_t n;
        if (d.left_ == 1) { // the next call twists, returns state_[0] and leaves left_ = N
            nextState(d.state_.data());
            n = std::min<int64_t>(count, kStateN);
            d.left_ = kStateN + 1 - static_cast<int>(n);
            d.next_ = 0;
        } else {
            n = std::min<int64_t>(count, d.left_ - 1);
            d.left_ -= static_cast<int>(n);
        }
        temperWords(d.state_.data() + d.next_, out, static_cast<int>(n));
        d.next_ += static_cast<uint32_t>(n);
        out += n;
        count -= n;
    }
}

// Fills dst[0..n) with bernoulli(p) draws as the CPU kernel makes them from engine `d`. Its
// test, (bits & (2^53 - 1)) * 2^-53 < p, is exact in doubles (a power of two scales exactly), so
// it is the integer test bits < ceil(p * 2^53).
template <typename scalar_t>
void drawInto(at::mt19937_data_pod &d, double p, scalar_t *dst, int64_t n)
{
    constexpr int64_t kChunk = 2048; // elements per block of engine outputs (16 KiB)
    constexpr uint64_t kMask = (uint64_t{ 1 } << 53) - 1;
    const auto threshold = static_cast<uint64_t>(std::ceil(p * static_cast<double>(kMask + 1)));
    std::array<uint32_t, 2 * kChunk> words;
    for (int64_t done = 0; done < n; done += kChunk) {
        const int64_t m = std::min(kChunk, n - done);
        engineOutputs(d, words.data(), 2 * m);
        for (int64_t i = 0; i < m; ++i) {
            const uint64_t bits = (static_cast<uint64_t>(words[2 * i]) << 32) | words[2 * i + 1];
            // (bits & kMask) < threshold without a branch (a mispredicted one per element
            // cost half the time): both are at most 2^53, so the difference's sign bit.
            const auto below = static_cast<int>(((bits & kMask) - threshold) >> 63);
            dst[done + i] = static_cast<scalar_t>(below);
        }
    }
}

// Draws of this kernel and of the CPU's from the same engine state (one that starts inside a
// block and crosses a twist), compared in values and in the state left.
bool agreesWithCpuKernel()
{
    at::Generator cpu = at::make_generator<at::CPUGeneratorImpl>(20260101);
    auto *impl = cpu.get<at::CPUGeneratorImpl>();
    for (int i = 0; i < 101; ++i)
        impl->random();
    at::mt19937_data_pod mine = impl->engine().data();
    at::Tensor theirs = at::empty({ 1500 }, at::kFloat);
    theirs.bernoulli_(0.3, cpu);
    at::Tensor ours = at::empty({ 1500 }, at::kFloat);
    drawInto(mine, 0.3, ours.data_ptr<float>(), ours.numel());
    const at::mt19937_data_pod after = impl->engine().data();
    return at::equal(ours, theirs) && mine.left_ == after.left_ && mine.next_ == after.next_ &&
           mine.state_ == after.state_;
}

bool fastPathAvailable()
{
    static const bool available = agreesWithCpuKernel();
    return available;
}

at::Tensor &bernoulliFloat(at::Tensor &self, double p, std::optional<at::Generator> generator)
{
    at::Generator device;
    if (!generator.has_value() || !generator->defined())
        device = defaultGenerator(self.device().index());
    else if (generator->device().type() == kDeviceType)
        device = *generator;
    if (!device.defined() || !(0 <= p && p <= 1) || !self.is_contiguous() || !fastPathAvailable()) {
        static const c10::OperatorHandle op =
            c10::Dispatcher::singleton().findSchemaOrThrow("aten::bernoulli_", "float");
        torch::jit::Stack stack{ self, p, generator };
        cpuFallback(op, &stack);
        return self;
    }
    if (self.numel() == 0)
        return self;
    const c10::DeviceGuard guard(self.device());
    const c10::DeviceIndex index = self.device().index();
    const bool host_addressable = hostAddressable(index);
    // Drawn straight into device memory the host can address (once the work queued before has
    // finished, as the fallback does). Otherwise into a block of the device's pinned allocator
    // and copied in stream order without waiting for the work before it, as the fallback
    // stages a result: the block is held for the copy.
    at::Tensor staged;
    if (host_addressable)
        synchronizeCurrentStream(index);
    else
        staged = at::detail::empty_strided_generic(self.sizes(), self.strides(), hostAllocator(),
                                                   c10::DispatchKeySet(c10::DispatchKey::CPU),
                                                   self.scalar_type());
    void *dst = host_addressable ? self.data_ptr() : staged.data_ptr();
    {
        std::lock_guard<std::mutex> lock(device.mutex());
        auto *impl = device.get<at::CPUGeneratorImpl>();
        at::mt19937 engine = impl->engine();
        at::mt19937_data_pod state = engine.data();
        AT_DISPATCH_ALL_TYPES_AND3(
            at::kBool, at::kBFloat16, at::kHalf, self.scalar_type(), "bernoulli_",
            [&] { drawInto(state, p, static_cast<scalar_t *>(dst), self.numel()); });
        engine.set_data(state);
        impl->set_engine(engine);
    }
    if (!host_addressable) {
        self.copy_(staged, /*non_blocking=*/true);
        countHostResultBytes(static_cast<uint64_t>(self.numel()) * self.itemsize());
    }
    return self;
}

} // namespace

void registerBernoulli()
{
    static auto *m = new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1,
                                        __FILE__, __LINE__);
    m->impl("bernoulli_.float", TORCH_FN(bernoulliFloat));
}

} // namespace torch_hal
