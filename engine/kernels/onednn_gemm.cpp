#include "onednn_gemm.hpp"

#include "parallel.hpp"

#include <atomic>
#include <stdexcept>

namespace xtgrad::detail {

namespace {

std::atomic<bool>& packing_switch() {
  static std::atomic<bool> on{false};
  return on;
}

}  // namespace

void set_weight_packing(bool on) {
  packing_switch().store(on, std::memory_order_relaxed);
}

bool weight_packing() {
  return packing_switch().load(std::memory_order_relaxed);
}

bool native_bf16_kernel(const std::string& kernel) {
  return kernel.find("avx512_core_bf16") != std::string::npos ||
         kernel.find("amx") != std::string::npos;
}

}  // namespace xtgrad::detail

#if XTGRAD_HAVE_ONEDNN

#include "bf16.hpp"
#include "onednn_packed_weights.hpp"
#include "scratch.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

// The OpenMP runtime oneDNN runs on (libgomp, linked by name): declared here
// rather than through a compiler's omp.h, which under clang belongs to libomp.
extern "C" int omp_get_max_threads();
extern "C" void omp_set_num_threads(int);

namespace xtgrad::detail {

namespace {

using dnnl::memory;

struct Key {
  std::size_t m, n, k, lda, ldb, ldc;
  bool transpose_a, transpose_b, accumulate;
  MatmulPrecision precision;
  int threads;
  bool bias;      // a float bias [1, n] added to every row of c
  bool packed_b;  // b in oneDNN's preferred layout (format_tag::any), packed once

  bool operator==(const Key& o) const {
    return m == o.m && n == o.n && k == o.k && lda == o.lda && ldb == o.ldb && ldc == o.ldc &&
           transpose_a == o.transpose_a && transpose_b == o.transpose_b &&
           accumulate == o.accumulate && precision == o.precision && threads == o.threads &&
           bias == o.bias && packed_b == o.packed_b;
  }
};

// A primitive with its argument memories, whose data handles are set per call.
// same_bits (a packed_b entry): oneDNN runs the same implementation as for
// the unpacked key, so reading b packed gives the same bits.
struct Entry {
  Key key;
  dnnl::matmul primitive;
  memory a, b, c, bias, scratchpad;
  std::size_t scratchpad_bytes;
  bool same_bits;
};

// Enough for every distinct product of a model's step (a transformer's
// forward and backward use a few dozen shapes; a product whose b is a
// weight adds a packed entry, used instead of its unpacked one).
constexpr std::size_t k_cache_entries = 64;

// The CPU engine, with oneDNN's process-wide state already built: oneDNN
// creates its global primitive cache (and the lock guarding it) and detects
// the ISA lazily, at the first primitive description. Describing and creating
// one tiny matmul here, inside this function's static initialization, orders
// that work before every thread's first GEMM through the C++ static-init
// guard, a synchronization ThreadSanitizer sees; libdnnl's own lazy
// initialization is not instrumented, and two threads racing into it were
// reported as a data race on the cache's lock.
const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine = [] {
    dnnl::engine created(dnnl::engine::kind::cpu, 0);
    const memory::desc one({1, 1}, memory::data_type::f32, memory::format_tag::ab);
    const dnnl::matmul::primitive_desc warm_up(dnnl::matmul::desc(one, one, one), created);
    dnnl::matmul{warm_up};
    return created;
  }();
  return engine;
}

memory::data_type data_type(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::highest:
      break;
    case MatmulPrecision::bf16:
      return memory::data_type::bf16;
  }
  return memory::data_type::f32;
}

memory::dim dim(std::size_t v) {
  return static_cast<memory::dim>(v);
}

// [rows, cols] at leading dimension ld, or its transpose (stored [cols, ld]).
memory::desc matrix(std::size_t rows, std::size_t cols, std::size_t ld, bool transposed,
                    memory::data_type type) {
  return memory::desc({dim(rows), dim(cols)}, type,
                      transposed ? memory::dims{1, dim(ld)} : memory::dims{dim(ld), 1});
}

dnnl::matmul::primitive_desc describe(const Key& key) {
  const memory::data_type type = data_type(key.precision);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    attr.set_post_ops(sum);
  }
  const memory::desc a = matrix(key.m, key.k, key.lda, key.transpose_a, type);
  const memory::desc b = key.packed_b
                             ? memory::desc({dim(key.k), dim(key.n)}, type, memory::format_tag::any)
                             : matrix(key.k, key.n, key.ldb, key.transpose_b, type);
  const memory::desc c = matrix(key.m, key.n, key.ldc, false, memory::data_type::f32);
  if (!key.bias)
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
  const memory::desc bias = matrix(1, key.n, key.n, false, memory::data_type::f32);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, bias, c), attr, cpu_engine());
}

struct ThreadState {
  dnnl::stream stream{cpu_engine()};
  std::vector<Entry> entries;  // most recently used first
  std::vector<unsigned char> scratchpad;
};

ThreadState& thread_state() {
  static thread_local ThreadState state;
  return state;
}

// The entry for `key`, moved to the front (created, and the least recently
// used dropped, on a miss).
Entry& lookup(ThreadState& state, const Key& key) {
  auto& entries = state.entries;
  const auto found =
      std::find_if(entries.begin(), entries.end(), [&](const Entry& e) { return e.key == key; });
  if (found != entries.end()) {
    std::rotate(entries.begin(), found, found + 1);
    return entries.front();
  }
  const auto pd = describe(key);
  bool same_bits = !key.packed_b;
  if (key.packed_b) {
    Key unpacked = key;
    unpacked.packed_b = false;
    same_bits = describe(unpacked).impl_info_str() == std::string(pd.impl_info_str());
  }
  const dnnl::engine& engine = cpu_engine();
  Entry entry{key,
              dnnl::matmul(pd),
              memory(pd.src_desc(), engine, nullptr),
              memory(pd.weights_desc(), engine, nullptr),
              memory(pd.dst_desc(), engine, nullptr),
              key.bias ? memory(pd.bias_desc(), engine, nullptr) : memory(),
              memory(pd.scratchpad_desc(), engine, nullptr),
              pd.scratchpad_desc().get_size(),
              same_bits};
  if (entries.size() == k_cache_entries) entries.pop_back();
  entries.insert(entries.begin(), std::move(entry));
  return entries.front();
}

}  // namespace

bool onednn_compiled() {
  return true;
}

namespace {

// Where a part's b comes from when it is a Parameter's value: the tag, the
// user's float array (b itself may be a bfloat16 copy) and the part's offset
// in b, and whether a first use already packs (k_pack_first_use_rows).
struct WeightPiece {
  WeightTag tag;
  const float* origin;
  std::size_t offset;
  bool first_use;
};

// Executes entry's primitive on the thread's stream; bias (float [n]) or null.
void execute(ThreadState& state, Entry& entry, const void* a, const void* b, float* c,
             const float* bias) {
  if (state.scratchpad.size() < entry.scratchpad_bytes)
    state.scratchpad.resize(entry.scratchpad_bytes);
  entry.a.set_data_handle(const_cast<void*>(a));
  entry.b.set_data_handle(const_cast<void*>(b));
  entry.c.set_data_handle(c);
  entry.scratchpad.set_data_handle(state.scratchpad.data());
  if (bias != nullptr) entry.bias.set_data_handle(const_cast<float*>(bias));
  // The C API takes the arguments as an array (the C++ one builds a map).
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, entry.a.get()},
                                  {DNNL_ARG_WEIGHTS, entry.b.get()},
                                  {DNNL_ARG_DST, entry.c.get()},
                                  {DNNL_ARG_SCRATCHPAD, entry.scratchpad.get()},
                                  {DNNL_ARG_BIAS, entry.bias.get(true)}};
  const int count = static_cast<int>(std::size(args)) - (bias != nullptr ? 0 : 1);
  dnnl::error::wrap_c_api(
      dnnl_primitive_execute(entry.primitive.get(), state.stream.get(), count, args),
      "xtgrad: oneDNN matmul failed");
}

// The packed copy of b [k, n] (stored at ldb, transposed or not, in the
// precision's data type) for `piece` in `layout`, packed now if this call
// is to; null when this call reads b unpacked.
std::shared_ptr<PackedWeight> packed_b(ThreadState& state, const WeightPiece& piece, const void* b,
                                       const Key& key, const memory::desc& layout) {
  const PackedWeightKey id{piece.tag.id, piece.tag.version, piece.origin,    piece.offset,  key.k,
                           key.n,        key.ldb,           key.transpose_b, key.precision, layout};
  bool pack = false;
  std::shared_ptr<PackedWeight> w = find_packed_weight(id, piece.first_use, pack);
  if (!pack) return w;
  const dnnl::engine& engine = cpu_engine();
  memory stored(matrix(key.k, key.n, key.ldb, key.transpose_b, data_type(key.precision)), engine,
                const_cast<void*>(b));
  w->memory = memory(layout, engine);
  dnnl::reorder(stored, w->memory).execute(state.stream, stored, w->memory);
  w->ready.store(true, std::memory_order_release);
  return w;
}

// One single-threaded primitive call on the calling thread; a and b are
// float at MatmulPrecision::highest, bfloat16 at bf16; bias (float [n]) or
// null; piece: b is (a part of) a Parameter's value, or null.
void run_primitive(const void* a, std::size_t lda, bool transpose_a, const void* b, std::size_t ldb,
                   bool transpose_b, float* c, std::size_t ldc, std::size_t m, std::size_t n,
                   std::size_t k, bool accumulate, MatmulPrecision precision, const float* bias,
                   const WeightPiece* piece) {
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
  ThreadState& state = thread_state();
  Key key{m,           n,           k,          lda,       ldb, ldc,
          transpose_a, transpose_b, accumulate, precision, 1,   bias != nullptr,
          false};
  if (piece != nullptr) {
    key.packed_b = true;
    Entry& entry = lookup(state, key);
    if (entry.same_bits) {
      const std::shared_ptr<PackedWeight> w = packed_b(state, *piece, b, key, entry.b.get_desc());
      if (w) {
        execute(state, entry, a, w->memory.get_data_handle(), c, bias);
        return;
      }
    }
    key.packed_b = false;
  }
  execute(state, lookup(state, key), a, b, c, bias);
}

// Runs part(begin, end) over the parts of [0, lines) lines (rows or columns
// of C): one part per k_onednn_parallel_macs multiply-adds, at most
// k_onednn_max_parts and at least k_onednn_min_part_lines lines each (but
// two parts where the lines allow, so that two threads still share the
// product), boundaries at multiples of k_onednn_split_align. The parts
// depend on the shape only, never on the thread count, and xtgrad's pool
// runs them (serially on one thread or inside a job of the pool).
template <class Part>
void run_parts(std::size_t lines, std::size_t macs, Part& part) {
  const std::size_t blocks = (lines + k_onednn_split_align - 1) / k_onednn_split_align;
  const std::size_t widest =
      std::max(lines / k_onednn_min_part_lines, std::min<std::size_t>(2, blocks));
  const std::size_t parts = std::max<std::size_t>(
      1, std::min({macs / k_onednn_parallel_macs, k_onednn_max_parts, widest}));
  const auto bound = [&](std::size_t i) {
    return std::min(lines, (blocks * i / parts) * k_onednn_split_align);
  };
  auto chunk = [&](std::size_t first, std::size_t last) {
    for (std::size_t i = first; i < last; ++i) part(bound(i), bound(i + 1));
  };
  parallel_run(parts, 1, 1, chunk);
}

// onednn_gemm on operands of element type E (float, or bfloat16 as
// std::uint16_t): the split described there. weight_origin: the user's
// float b when b is a Parameter's value (weight names it), else null. A
// split over C's columns reads a piece of b per part, each packed apart.
template <class E>
void split_gemm(const E* a, std::size_t lda, bool transpose_a, const E* b, std::size_t ldb,
                bool transpose_b, float* c, std::size_t ldc, std::size_t m, std::size_t n,
                std::size_t k, bool accumulate, MatmulPrecision precision, const float* bias,
                WeightTag weight, const float* weight_origin) {
  const bool first_use = m >= k_pack_first_use_rows;
  if (m >= n) {
    const WeightPiece whole{weight, weight_origin, 0, first_use};
    const WeightPiece* piece = weight_origin != nullptr ? &whole : nullptr;
    auto rows = [&](std::size_t begin, std::size_t end) {
      const E* a_part = transpose_a ? a + begin : a + begin * lda;
      run_primitive(a_part, lda, transpose_a, b, ldb, transpose_b, c + begin * ldc, ldc,
                    end - begin, n, k, accumulate, precision, bias, piece);
    };
    run_parts(m, m * n * k, rows);
  } else {
    auto columns = [&](std::size_t begin, std::size_t end) {
      const std::size_t offset = transpose_b ? begin * ldb : begin;
      const WeightPiece part{weight, weight_origin, offset, first_use};
      run_primitive(a, lda, transpose_a, b + offset, ldb, transpose_b, c + begin, ldc, m,
                    end - begin, k, accumulate, precision, bias == nullptr ? nullptr : bias + begin,
                    weight_origin != nullptr ? &part : nullptr);
    };
    run_parts(n, m * n * k, columns);
  }
}

}  // namespace

void onednn_gemm(const float* a, std::size_t lda, bool transpose_a, const float* b, std::size_t ldb,
                 bool transpose_b, float* c, std::size_t ldc, std::size_t m, std::size_t n,
                 std::size_t k, bool accumulate, MatmulPrecision precision, const float* bias,
                 WeightTag weight, RoundedOperands rounded) {
  // oneDNN always runs on one OpenMP thread: an OpenMP team's workers keep
  // spinning after each call (OMP_WAIT_POLICY is active by default and read
  // only at load), taking the core xtgrad's pool needs next. A large product
  // is split instead over xtgrad's pool (parallel.hpp) into independent
  // products on blocks of C, each a single-threaded primitive on pointer
  // offsets with the same strides: C's rows when M >= N, else its columns.
  // The parts depend on the shape only (run_parts), so 1, 2 and 3 threads
  // give the same bits (tested in test_gemm_backend.cpp and
  // test_parallel.cpp); a split that followed the thread count would not:
  // oneDNN's blocking over K depends on a part's M and N, and an FFN's dW
  // differed in its first element between 1 and 2 threads.
  if (!weight_packing()) weight = WeightTag{};
  if (precision != MatmulPrecision::bf16) {
    split_gemm(a, lda, transpose_a, b, ldb, transpose_b, c, ldc, m, n, k, accumulate, precision,
               bias, weight, weight.id != 0 ? b : nullptr);
    return;
  }
  // bf16: each operand's stored block ([k, m] when a is transposed, else
  // [m, k]; [n, k] or [k, n] for b) rounded once into contiguous scratch
  // (unless the caller rounded it), then split as in float; the primitive
  // accumulates in float.
  const std::size_t a_rows = transpose_a ? k : m, a_cols = transpose_a ? m : k;
  const std::size_t b_rows = transpose_b ? n : k, b_cols = transpose_b ? k : n;
  const std::uint16_t* a16 = rounded.a;
  const std::uint16_t* b16 = rounded.b;
  if (a16 == nullptr) {
    std::uint16_t* scratch =
        thread_scratch<std::uint16_t>(ScratchSlot::gemm_bf16_a, a_rows * a_cols);
    to_bf16_matrix(a, lda, a_rows, a_cols, scratch);
    a16 = scratch;
  }
  if (b16 == nullptr) {
    std::uint16_t* scratch =
        thread_scratch<std::uint16_t>(ScratchSlot::gemm_bf16_b, b_rows * b_cols);
    to_bf16_matrix(b, ldb, b_rows, b_cols, scratch);
    b16 = scratch;
  }
  split_gemm<std::uint16_t>(a16, a_cols, transpose_a, b16, b_cols, transpose_b, c, ldc, m, n, k,
                            accumulate, precision, bias, weight, weight.id != 0 ? b : nullptr);
}

namespace {

// The implementation oneDNN picks for a [256, 256] . [256, 256] product at
// `precision`, "" when it has none.
std::string probe_kernel(MatmulPrecision precision) {
  const Key probe{256, 256, 256, 256, 256, 256, false, false, false, precision, 1, false, false};
  try {
    return describe(probe).impl_info_str();
  } catch (const dnnl::error&) {
    return "";
  }
}

}  // namespace

std::string onednn_info(MatmulPrecision precision) {
  const dnnl_version_t* v = dnnl_version();
  const std::string kernel =
      precision == MatmulPrecision::bf16 ? onednn_bf16_kernel() : probe_kernel(precision);
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " (" + (kernel.empty() ? "none" : kernel) + ")";
}

const std::string& onednn_bf16_kernel() {
  static const std::string kernel = probe_kernel(MatmulPrecision::bf16);
  return kernel;
}

std::size_t onednn_cached_primitives() {
  return thread_state().entries.size();
}

}  // namespace xtgrad::detail

#else  // built without oneDNN

namespace xtgrad::detail {

bool onednn_compiled() {
  return false;
}

void onednn_gemm(const float*, std::size_t, bool, const float*, std::size_t, bool, float*,
                 std::size_t, std::size_t, std::size_t, std::size_t, bool, MatmulPrecision,
                 const float*, WeightTag, RoundedOperands) {
  throw std::logic_error("xtgrad: onednn_gemm called in a build without oneDNN");
}

std::string onednn_info(MatmulPrecision) {
  return "oneDNN (not built)";
}

const std::string& onednn_bf16_kernel() {
  static const std::string none;
  return none;
}

std::size_t onednn_cached_primitives() {
  return 0;
}

PackedWeightStats packed_weight_stats() {
  return {0, 0, 0};
}

void clear_packed_weights() {}

}  // namespace xtgrad::detail

#endif
