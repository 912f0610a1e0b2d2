// A warm tape records and runs backward without allocating: every heap
// allocation of this executable is counted (malloc and its relatives, which
// operator new and xtensor's aligned allocator both reach), and a training
// step through linear, layer_norm, rms_norm, dropout, softmax, log_softmax,
// matmul, sum and cross_entropy, its backward and Tape::clear() must make none
// once the tape has seen the step; so must a larger step whose passes run on
// the thread pool, with the optimizers' steps (Adam, AdamW with amsgrad, SGD
// with momentum). Also BackwardFn, the node's rule: inline
// captures, a kept heap block, moves.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/engine/gemm_backend.hpp>
#include <xtgrad/optim/optim.hpp>

#include "support/test_helpers.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define XTGRAD_COUNT_WITH_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define XTGRAD_COUNT_WITH_SANITIZER 1
#endif
#endif

#if defined(XTGRAD_COUNT_WITH_SANITIZER)
// The sanitizer runtime's hook API (sanitizer/allocator_interface.h, which
// GCC does not install), declared here.
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*,
                                                                             std::size_t),
                                                         void (*free_hook)(const volatile void*));
#endif

namespace {

std::atomic<long> allocations{0};

void count_one() {
  allocations.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

#if defined(XTGRAD_COUNT_WITH_SANITIZER)
// Under AddressSanitizer its allocator owns malloc: count through its hooks.
namespace {
void on_malloc(const volatile void*, std::size_t) {
  count_one();
}
void on_free(const volatile void*) {}
const int hooks_installed = __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}  // namespace
#else
// Otherwise the C allocation functions are replaced by counting ones that
// forward to glibc's own.
extern "C" {
void* __libc_malloc(std::size_t size);
void* __libc_calloc(std::size_t count, std::size_t size);
void* __libc_realloc(void* p, std::size_t size);
void* __libc_memalign(std::size_t alignment, std::size_t size);
void __libc_free(void* p);

void* malloc(std::size_t size) {
  count_one();
  return __libc_malloc(size);
}
void* calloc(std::size_t count, std::size_t size) {
  count_one();
  return __libc_calloc(count, size);
}
void* realloc(void* p, std::size_t size) {
  count_one();
  return __libc_realloc(p, size);
}
void* memalign(std::size_t alignment, std::size_t size) {
  count_one();
  return __libc_memalign(alignment, size);
}
void* aligned_alloc(std::size_t alignment, std::size_t size) {
  count_one();
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** out, std::size_t alignment, std::size_t size) {
  count_one();
  void* p = __libc_memalign(alignment, size);
  if (!p) return 12;  // ENOMEM
  *out = p;
  return 0;
}
void free(void* p) {
  __libc_free(p);
}
}
#endif

using namespace xtgrad;
using xtgrad::testing::random_array;

namespace {

// The counted allocations while f runs.
template <class F>
long allocations_during(F&& f) {
  const long before = allocations.load();
  f();
  return allocations.load() - before;
}

// A small network with every op of the step (see the file comment).
struct Step {
  static constexpr std::size_t rows = 6, in = 8, hidden = 16, classes = 5;
  Parameter<float> w1{"w1", random_array<float>({hidden, in}, 1)};
  Parameter<float> b1{"b1", random_array<float>({hidden}, 2)};
  Parameter<float> gamma{"gamma", random_array<float>({hidden}, 3)};
  Parameter<float> beta{"beta", random_array<float>({hidden}, 4)};
  Parameter<float> scale{"scale", random_array<float>({hidden}, 5)};
  Parameter<float> w2{"w2", random_array<float>({hidden, classes}, 6)};
  xt::xarray<float> x = random_array<float>({rows, in}, 7);
  Indices target = Indices{0, 4, 2, 2, 1, 3};
  Tape<float> tape;
  std::uint64_t step = 0;

  float run() {
    tape.clear();
    for (Parameter<float>* p : {&w1, &b1, &gamma, &beta, &scale, &w2}) p->zero_grad();
    const Var<float> in = tape.leaf(x);
    Var<float> h = linear(in, tape.param(w1), std::optional(tape.param(b1)));
    h = layer_norm(h, std::optional(tape.param(gamma)), std::optional(tape.param(beta)));
    h = rms_norm(h, std::optional(tape.param(scale)));
    h = dropout(h, 0.25, true, DropoutKey{11, step++, 0});
    const Var<float> p = softmax(h, -1);
    const Var<float> logits = matmul(log_softmax(p, -1), tape.param(w2));
    const Var<float> loss = add(cross_entropy(logits, target), sum(logits));
    tape.backward(loss);
    return loss.value()();
  }
};

// A step large enough that its passes split over two threads (fused
// activation_linear with bias, layer_norm, cross_entropy) and few-row
// products (the weight-streaming GEMM paths), then an optimizer step.
struct PoolStep {
  static constexpr std::size_t rows = 512, in = 96, hidden = 640, classes = 1000;
  Parameter<float> w1{"w1", random_array<float>({hidden, in}, 1)};
  Parameter<float> w2{"w2", random_array<float>({classes, hidden}, 2)};
  Parameter<float> b2{"b2", random_array<float>({classes}, 3)};
  Parameter<float> gamma{"gamma", random_array<float>({classes}, 4)};
  xt::xarray<float> x = random_array<float>({rows, in}, 5);
  xt::xarray<float> one_row = random_array<float>({3, in}, 6);
  Indices target = xt::arange<std::int64_t>(0, rows) % std::int64_t(classes);
  std::vector<Parameter<float>*> params{&w1, &w2, &b2, &gamma};
  optim::Adam<float> adam{params, optim::AdamOptions(1e-3)};
  optim::AdamW<float> adamw{params, optim::AdamWOptions(1e-3).amsgrad(true)};
  optim::SGD<float> sgd{params, optim::SGDOptions(1e-3).momentum(0.9)};
  Tape<float> tape;

  void run() {
    tape.clear();
    for (Parameter<float>* p : params) p->zero_grad();
    const Var<float> h = linear(tape.leaf(x, false), tape.param(w1));
    Var<float> logits =
        activation_linear(h, Activation::gelu, tape.param(w2), std::optional(tape.param(b2)));
    logits = layer_norm(logits, std::optional(tape.param(gamma)));
    const Var<float> few = linear(tape.leaf(one_row, false), tape.param(w1));  // [3, hidden]
    const Var<float> loss = add(cross_entropy(logits, target), mean(few));
    tape.backward(loss);
    adam.step();
    adamw.step();
    sgd.step();
  }
};

struct Capture {
  std::shared_ptr<int> alive;
  unsigned char padding[256] = {};  // too large for BackwardFn's inline storage
  void operator()(Tape<float>&, const xt::xarray<float>&) const { ++*alive; }
};

}  // namespace

TEST_CASE("tape allocations: a warm training step allocates nothing") {
  Step s;
  float first = 0;
  CHECK(allocations_during([&] { first = s.run(); }) > 0);  // a cold tape allocates its nodes
  CHECK(std::isfinite(first));
  s.run();  // the tape and every buffer have now seen the step
  for (int k = 0; k < 3; ++k) CHECK(allocations_during([&] { s.run(); }) == 0);
  // The gradients are those of a fresh tape: warm buffers change nothing.
  Step fresh;
  fresh.step = s.step - 1;
  fresh.run();
  for (Parameter<float>* p : {&fresh.w1, &fresh.gamma, &fresh.beta, &fresh.scale, &fresh.w2}) {
    const std::string& name = p->name;
    const Parameter<float>* q = name == "w1"      ? &s.w1
                                : name == "gamma" ? &s.gamma
                                : name == "beta"  ? &s.beta
                                : name == "scale" ? &s.scale
                                                  : &s.w2;
    CHECK(xt::allclose(p->grad, q->grad, 0.0, 0.0));
  }
  // And the allocation counter counts: a new array is seen.
  CHECK(allocations_during([] { xt::xarray<float> a = xt::zeros<float>({64}); }) >= 1);
}

// OpenBLAS's own count (its API; set_num_threads sets it too).
extern "C" void openblas_set_num_threads(int num_threads);

TEST_CASE(
    "tape allocations: a warm step on the thread pool, with optimizer steps, allocates nothing") {
  const int before = get_num_threads();
  const GemmBackend gemm_backend = get_gemm_backend();
  for (int threads : {2, 1}) {
    CAPTURE(threads);
    set_num_threads(threads);
    // OpenBLAS 0.3's multithreaded GEMM mallocs its job list on every call
    // (level3_thread.c, USE_ALLOC_HEAP): not xtgrad's, so left out here.
    openblas_set_num_threads(1);
    // So does oneDNN's matmul (its argument map, 7 allocations a call in 2.6).
    set_gemm_backend(GemmBackend::openblas);
    PoolStep s;
    s.run();
    s.run();  // the tape, the pool and every buffer have now seen the step
    for (int k = 0; k < 3; ++k) CHECK(allocations_during([&] { s.run(); }) == 0);
  }
  set_num_threads(before);
  set_gemm_backend(gemm_backend);
}

TEST_CASE("tape allocations: BackwardFn keeps small captures inline and reuses its heap block") {
  Tape<float> tape;
  const xt::xarray<float> g = xt::zeros<float>({1});
  int calls = 0;
  BackwardFn<float> f;
  CHECK(!f);
  // A capture of a few words: no allocation at all.
  CHECK(allocations_during([&] {
          f = [&calls, a = std::size_t(1), b = std::size_t(2)](
                  Tape<float>&, const xt::xarray<float>&) { calls += static_cast<int>(a + b); };
        }) == 0);
  f(tape, g);
  CHECK(calls == 3);
  // A large capture: one allocation the first time, none when the next one fits.
  auto alive = std::make_shared<int>(0);
  CHECK(allocations_during([&] { f.emplace(Capture{alive}); }) == 1);
  CHECK(alive.use_count() == 2);
  f(tape, g);
  CHECK(*alive == 1);
  CHECK(allocations_during([&] {
          f.reset();
          f.emplace(Capture{alive});
        }) == 0);
  CHECK(alive.use_count() == 2);  // the replaced capture was destroyed
  // Moves swap heap blocks: no allocation, the capture travels.
  BackwardFn<float> moved;
  CHECK(allocations_during([&] { moved = std::move(f); }) == 0);
  CHECK(!f);
  moved(tape, g);
  CHECK(*alive == 2);
  CHECK(alive.use_count() == 2);
  moved = nullptr;
  CHECK(alive.use_count() == 1);
  // A rule on a tape node: dropped when the node needs no gradient.
  const std::size_t i = tape.record("probe", {}, false);
  tape.set_backward(i, Capture{alive});
  CHECK(alive.use_count() == 1);
}

TEST_CASE("tape allocations: Tape::save keeps a node's memory across clear()") {
  Tape<float> tape;
  auto record = [&](std::size_t n) {
    const std::size_t i = tape.record("probe", {}, true);
    double* d = tape.save<double>(i, n);
    for (std::size_t k = 0; k < n; ++k) d[k] = static_cast<double>(k) + 0.5;
    return i;
  };
  const std::size_t i = record(100);
  CHECK(tape.saved<double>(i)[99] == 99.5);
  tape.clear();
  CHECK(allocations_during([&] { record(100); }) == 0);
  tape.clear();
  CHECK(allocations_during([&] { record(10); }) == 0);  // smaller fits too
  CHECK(tape.saved<double>(0)[9] == 9.5);
}
