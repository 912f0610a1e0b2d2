#pragma once
// The fuzz harnesses, shared by the libFuzzer targets
// (tests/hardening/fuzz/fuzz_*.cpp, built with clang when XTGRAD_FUZZ is on) and by the
// corpus replay in tests/hardening/test_fuzz_corpus.cpp (every build), so that each input
// saved under tests/hardening/fuzz/corpus/ -- seeds and former crashes -- is a
// regression test everywhere.
//
// Each harness feeds one input to the library and lets only the documented
// exceptions through: std::invalid_argument for bad content or arguments,
// std::logic_error (exactly) for misuse of handles, std::runtime_error for
// I/O, AnomalyError in anomaly mode. Anything else -- another exception type,
// an input or a module changed by a failed call, a result of the wrong shape
// -- escapes as an exception, which libFuzzer reports as a crash (and doctest
// as a failure). Crashes, leaks and undefined behaviour are the sanitizers'.

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/io/io.hpp>
#include <xtgrad/modules/modules.hpp>
#include <xtgrad/optim/optim.hpp>
#include <xtgrad/training/training_state.hpp>

namespace xtgrad::fuzz {

// A broken invariant: never caught by the harnesses.
struct Violation : std::exception {
  explicit Violation(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }
  std::string what_;
};

inline void require(bool ok, const std::string& what) {
  if (!ok) throw Violation("fuzz invariant broken: " + what);
}

// The input as a stream of decisions; reads past the end give zeros.
class Bytes {
 public:
  Bytes(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  std::uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : byte() % n; }
  bool flag() { return byte() & 1; }
  // Mostly small integers and halves; now and then a special value.
  double number() {
    static constexpr double k_special[] = {0.0,
                                           -0.0,
                                           1.0,
                                           -1.0,
                                           std::numeric_limits<double>::quiet_NaN(),
                                           std::numeric_limits<double>::infinity(),
                                           -std::numeric_limits<double>::infinity(),
                                           1e30,
                                           -1e-30,
                                           std::numeric_limits<double>::max(),
                                           std::numeric_limits<double>::denorm_min(),
                                           1e-8};
    const std::uint8_t b = byte();
    if (b >= 244) return k_special[b - 244];
    return (static_cast<int>(b) - 122) / 8.0;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// Lets through exactly the documented types (std::runtime_error only when
// `io`: files are read); anything else propagates. True when f returned.
template <class F>
bool documented(F&& f, bool io = true) {
  try {
    f();
    return true;
  } catch (const AnomalyError&) {
  } catch (const std::invalid_argument&) {
  } catch (const std::logic_error& e) {
    if (typeid(e) != typeid(std::logic_error))  // out_of_range, length_error, ...
      throw Violation(std::string("undocumented exception ") + typeid(e).name() + ": " + e.what());
  } catch (const std::runtime_error& e) {
    if (!io || typeid(e) != typeid(std::runtime_error))
      throw Violation(std::string("undocumented exception ") + typeid(e).name() + ": " + e.what());
  }
  return false;
}

template <class T>
bool bit_equal(const xt::xarray<T>& a, const xt::xarray<T>& b) {
  return a.shape() == b.shape() &&
         (a.size() == 0 || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// A scratch directory for this process, on tmpfs when there is one; removed
// at exit.
inline std::filesystem::path& scratch_path() {
  static std::filesystem::path path;
  return path;
}
inline void remove_scratch() {
  std::error_code ignored;
  if (!scratch_path().empty()) std::filesystem::remove_all(scratch_path(), ignored);
}
inline const std::filesystem::path& scratch() {
  static const bool made = [] {
    const std::filesystem::path base = std::filesystem::exists("/dev/shm")
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    scratch_path() = base / ("xtgrad-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(scratch_path());
    std::atexit(remove_scratch);
    return true;
  }();
  (void)made;
  return scratch_path();
}

inline void write_file(const std::filesystem::path& path, const std::uint8_t* data,
                       std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  require(out.good(), "cannot write " + path.string());
}

// ---------------------------------------------------------------- .npy files

template <class T>
void load_one_npy(const std::filesystem::path& file, const std::optional<NpyHeader>& header) {
  std::optional<xt::xarray<T>> loaded;
  documented([&] { loaded = load_npy<T>(file); });
  if (!loaded) return;
  require(header.has_value(), "load_npy accepted a file read_npy_header refused");
  require(header->dtype == npy_dtype_name<T>(), "load_npy accepted the other dtype");
  require(std::equal(loaded->shape().begin(), loaded->shape().end(), header->shape.begin(),
                     header->shape.end()),
          "load_npy gave another shape than the header");
  require(loaded->size() == header->size, "load_npy gave another size than the header");
}

// The input is one .npy file.
inline void npy_one(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path file = scratch() / "input.npy";
  write_file(file, data, size);
  std::optional<NpyHeader> header;
  documented([&] { header = read_npy_header(file); });
  load_one_npy<float>(file, header);
  load_one_npy<double>(file, header);
}

// ---------------------------------------------------------------- safetensors files

// The input is one safetensors file. What read_safetensors accepts must
// write back (write_safetensors refuses nothing a read produced) and read
// again to the same names, metadata, dtypes (F16 / BF16 come back as F32)
// and bits; reading one selected tensor gives that tensor.
// Loading the file as a checkpoint of Linear(2, 3) (Module::load: the
// metadata, the module config JSON, the names) must succeed with the shapes
// kept or fail with the module unchanged.
template <class T>
void load_safetensors_checkpoint_into(const std::filesystem::path& file) {
  Linear<T> module(2, 3);
  std::vector<xt::xarray<T>> before;
  for (Parameter<T>* p : module.parameters()) before.push_back(p->value);
  const bool loaded = documented([&] { module.load(file); });
  const auto params = module.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (loaded)
      require(params[i]->value.shape() == before[i].shape(), "load changed a parameter's shape");
    else
      require(bit_equal(params[i]->value, before[i]), "a failed load changed the module");
  }
}

inline void safetensors_one(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path file = scratch() / "input.safetensors";
  write_file(file, data, size);
  load_safetensors_checkpoint_into<float>(file);
  load_safetensors_checkpoint_into<double>(file);
  std::optional<Safetensors> read;
  documented([&] { read = read_safetensors(file); });
  if (!read) return;
  const std::filesystem::path copy = scratch() / "copy.safetensors";
  write_safetensors(copy, read->tensors, read->metadata);
  const Safetensors again = read_safetensors(copy);
  require(again.metadata == read->metadata, "the metadata changed in a write and read");
  require(again.tensors.size() == read->tensors.size(), "tensors were lost in a write and read");
  for (const auto& [name, tensor] : read->tensors) {
    const auto found = again.tensors.find(name);
    require(found != again.tensors.end(), "a tensor was renamed in a write and read");
    const StoredTensor& back = found->second;
    const bool doubles = tensor.dtype() == SafetensorsDtype::F64;
    require(tensor.holds<double>() == doubles, "a tensor is held in the wrong type for its dtype");
    require(back.dtype() == (doubles ? SafetensorsDtype::F64 : SafetensorsDtype::F32),
            "write_safetensors wrote another dtype than F32 / F64");
    require(doubles ? bit_equal(back.get<double>(), tensor.get<double>())
                    : bit_equal(back.get<float>(), tensor.get<float>()),
            "a tensor's values changed in a write and read");
  }
  if (read->tensors.empty()) return;
  const std::string first = read->tensors.begin()->first;
  const Safetensors one =
      read_safetensors(file, [&](const std::string& name) { return name == first; });
  require(one.tensors.size() == 1 && one.tensors.count(first) == 1,
          "select did not read exactly the selected tensor");
}

// ---------------------------------------------------------------- IDX files

// The bound of the IDX harness: small, so that a claimed size is cheap to
// refuse and an accepted one cheap to read.
inline constexpr std::size_t k_idx_fuzz_max_elements = std::size_t{1} << 20;

template <class V>
void load_one_idx(const std::filesystem::path& file, const std::optional<IdxHeader>& header) {
  std::optional<xt::xarray<V>> loaded;
  documented([&] { loaded = load_idx<V>(file, k_idx_fuzz_max_elements); });
  if (!loaded) return;
  require(header.has_value(), "load_idx accepted a file read_idx_header refused");
  require(std::equal(loaded->shape().begin(), loaded->shape().end(), header->shape.begin(),
                     header->shape.end()),
          "load_idx gave another shape than the header");
  require(loaded->size() == header->size, "load_idx gave another size than the header");
}

// The input is one IDX file, gzip-compressed when it starts with 1f 8b (the
// corpus holds both kinds).
inline void idx_one(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path file = scratch() / "input.idx";
  write_file(file, data, size);
  std::optional<IdxHeader> header;
  documented([&] { header = read_idx_header(file, k_idx_fuzz_max_elements); });
  load_one_idx<std::uint8_t>(file, header);
  load_one_idx<std::int8_t>(file, header);
  load_one_idx<std::int16_t>(file, header);
  load_one_idx<std::int32_t>(file, header);
  load_one_idx<float>(file, header);
  load_one_idx<double>(file, header);
}

// ---------------------------------------------------------------- checkpoints

// The input is a checkpoint directory: chunks separated by "====" become
// manifest.tsv, weight.npy, bias.npy and extra.npy, in that order. Loading it
// into Linear(2, 3) of either dtype must succeed with the module's shapes or
// fail with the module unchanged.
template <class T>
void load_checkpoint_into(const std::filesystem::path& dir) {
  Linear<T> module(2, 3);
  std::vector<xt::xarray<T>> before;
  for (Parameter<T>* p : module.parameters()) before.push_back(p->value);
  const bool loaded = documented([&] { module.load(dir); });
  const auto params = module.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (loaded)
      require(params[i]->value.shape() == before[i].shape(), "load changed a parameter's shape");
    else
      require(bit_equal(params[i]->value, before[i]), "a failed load changed the module");
  }
}

inline void checkpoint_one(const std::uint8_t* data, std::size_t size) {
  static const char* const k_names[] = {"manifest.tsv", "weight.npy", "bias.npy", "extra.npy"};
  const std::filesystem::path dir = scratch() / "ckpt";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::size_t start = 0;
  for (std::size_t chunk = 0; chunk < 4; ++chunk) {
    std::size_t end = input.find("====", start);
    if (end == std::string::npos || chunk == 3) end = input.size();
    write_file(dir / k_names[chunk], data + start, end - start);
    if (end == input.size()) break;
    start = end + 4;
  }
  load_checkpoint_into<float>(dir);
  load_checkpoint_into<double>(dir);
}

// ---------------------------------------------------------------- training-state directories

// The input is a training-state directory: chunks separated by "====" become
// manifest.tsv, scalars.tsv and f0.npy ... f7.npy, in that order. Reading it
// must succeed within the memory limit or fail with a documented exception;
// loading it as the training state of Linear(2, 3) + AdamW (amsgrad) +
// StepLR, after one step, must succeed with the shapes kept (and a step then
// work) or fail with the model, the optimizer and the schedule unchanged.
template <class T>
bool state_equal(const StateDict<T>& a, const StateDict<T>& b) {
  if (a.arrays.size() != b.arrays.size() || a.integers != b.integers || a.strings != b.strings ||
      a.reals.size() != b.reals.size())
    return false;
  for (const auto& [name, array] : a.arrays)
    if (b.arrays.count(name) == 0 || !bit_equal(array, b.arrays.at(name))) return false;
  for (const auto& [name, value] : a.reals)
    if (b.reals.count(name) == 0 || std::memcmp(&value, &b.reals.at(name), sizeof value) != 0)
      return false;
  return true;
}

template <class T>
void load_state_into(const std::filesystem::path& dir) {
  constexpr std::size_t k_limit = std::size_t(1) << 16;
  std::optional<StateDict<T>> state;
  documented([&] { state = load_state_directory<T>(dir, k_limit); });
  if (state) {
    std::size_t bytes = 0;
    for (const auto& [name, array] : state->arrays) bytes += array.size() * sizeof(T);
    require(bytes <= k_limit, "load_state_directory read more than its limit");
  }

  Linear<T> model(2, 3);
  optim::AdamW<T> adamw(model.parameters(), optim::AdamWOptions(0.1).amsgrad(true));
  optim::StepLR<T> schedule(adamw, 2);
  const auto give_gradients = [&] {
    for (Parameter<T>* p : model.parameters()) {
      p->grad = xt::ones_like(p->value);
      p->has_grad = true;
    }
  };
  give_gradients();
  adamw.step();
  schedule.step();
  std::vector<xt::xarray<T>> values;
  for (Parameter<T>* p : model.parameters()) values.push_back(p->value);
  const StateDict<T> optimizer_before = adamw.state_dict();
  const StateDict<T> schedule_before = schedule.state_dict();
  const bool loaded = documented([&] { load_training_state(dir, model, adamw, &schedule); });
  const auto params = model.parameters();
  if (!loaded) {
    for (std::size_t i = 0; i < params.size(); ++i)
      require(bit_equal(params[i]->value, values[i]), "a failed load changed the model");
    require(state_equal(adamw.state_dict(), optimizer_before),
            "a failed load changed the optimizer");
    require(state_equal(schedule.state_dict(), schedule_before),
            "a failed load changed the schedule");
    return;
  }
  for (std::size_t i = 0; i < params.size(); ++i)
    require(params[i]->value.shape() == values[i].shape(), "load changed a parameter's shape");
  give_gradients();
  try {
    adamw.step();
    schedule.step();
  } catch (const std::exception& e) {
    throw Violation(std::string("a step after a successful load threw: ") + e.what());
  }
}

inline void state_one(const std::uint8_t* data, std::size_t size) {
  static const char* const k_names[] = {"manifest.tsv", "scalars.tsv", "f0.npy", "f1.npy",
                                        "f2.npy",       "f3.npy",      "f4.npy", "f5.npy",
                                        "f6.npy",       "f7.npy"};
  constexpr std::size_t k_chunks = sizeof k_names / sizeof k_names[0];
  const std::filesystem::path dir = scratch() / "state";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::size_t start = 0;
  for (std::size_t chunk = 0; chunk < k_chunks; ++chunk) {
    std::size_t end = input.find("====", start);
    if (end == std::string::npos || chunk == k_chunks - 1) end = input.size();
    write_file(dir / k_names[chunk], data + start, end - start);
    if (end == input.size()) break;
    start = end + 4;
  }
  load_state_into<float>(dir);
  load_state_into<double>(dir);
}

// ---------------------------------------------------------------- op sequences

// Every byte is consumed in a sequenced statement (never two in one call's
// arguments), so that an input means the same program with any compiler.
// Interprets the input as a program of up to 64 calls on two tapes: leaves
// and Parameters of random shapes (0 to 4 along up to 3 axes) and values
// (NaN, inf, huge and tiny included), every op (torch-style dims, sizes
// and indices from -2 to 5), the functional API, a module, backward with right and wrong dy, clear,
// release, zero_grad, recording and anomaly modes, reshaping a recorded Parameter, optimizer steps
// and clipping. Arguments are picked among everything recorded so far (stale and empty handles
// included). Recorded leaves must never change.
template <class T>
class TapeProgram {
 public:
  explicit TapeProgram(Bytes& in) : in_(in) {}

  void run() {
    for (int step = 0; step < 64 && !in_.empty(); ++step) {
      const std::size_t op = in_.below(20);
      documented([&] { call(op); }, /*io=*/false);
      check_leaves();
    }
  }

 private:
  struct Leaf {
    Var<T> var;
    xt::xarray<T> copy;
  };

  Shape shape() {
    Shape s(in_.below(4));
    for (auto& d : s) d = in_.below(5);
    return s;
  }

  xt::xarray<T> values(const Shape& s) {
    xt::xarray<T> a = xt::xarray<T>::from_shape(s);
    for (auto& v : a) v = static_cast<T>(in_.number());
    return a;
  }

  // Any recorded Var, now and then an empty handle.
  Var<T> pick() {
    if (vars_.empty() || in_.below(16) == 0) return Var<T>();
    return vars_[in_.below(vars_.size())];
  }
  std::optional<Var<T>> maybe() {
    if (in_.flag()) return std::nullopt;
    return pick();
  }
  Activation pick_activation() { return static_cast<Activation>(in_.below(6)); }  // 5: invalid

  void keep(const Var<T>& v) {
    if (vars_.size() < 256) vars_.push_back(v);
  }

  std::vector<Parameter<T>*> parameter_pointers() {
    std::vector<Parameter<T>*> out;
    for (Parameter<T>& p : params_)
      if (in_.flag()) out.push_back(&p);
    return out;
  }

  void call(std::size_t op) {
    Tape<T>& tape = tapes_[in_.below(8) == 0 ? 1 : 0];
    switch (op) {
      case 0: {  // leaf
        const xt::xarray<T> v = values(shape());
        const Var<T> x = tape.leaf(v, in_.flag());
        leaves_.push_back({x, v});
        keep(x);
        break;
      }
      case 1: {  // param
        if (params_.size() < 16) params_.emplace_back("p", values(shape()));
        keep(tape.param(params_[in_.below(params_.size())]));
        break;
      }
      case 2: {
        const Var<T> x = pick(), w = pick();
        const auto b = maybe();
        const std::size_t layout = in_.below(9);  // 8: outside the enumeration
        keep(
            linear(x, w, b, layout == 8 ? static_cast<WeightLayout>(7) : WeightLayout(layout % 2)));
        break;
      }
      case 3: {
        const Var<T> x = pick();
        keep(activation(x, pick_activation()));
        break;
      }
      case 4: {
        const Var<T> u = pick(), g = pick();
        keep(gated(u, g, pick_activation()));
        break;
      }
      case 5: {
        const Var<T> a = pick(), b = pick();
        const std::size_t kind = in_.below(3);
        keep(kind == 0 ? add(a, b) : kind == 1 ? sub(a, b) : mul(a, b));
        break;
      }
      case 6: {
        const Var<T> a = pick();
        keep(scale(a, static_cast<T>(in_.number())));
        break;
      }
      case 7: {
        const Var<T> a = pick();
        keep(in_.flag() ? sum(a) : mean(a));
        break;
      }
      case 8: {
        const Var<T> p = pick(), t = pick();
        keep(mse(p, t));
        break;
      }
      case 9: {
        const Var<T> x = pick(), w1 = pick(), b1 = pick(), w2 = pick(), b2 = pick();
        keep(in_.flag() ? positionwise_ffn(x, w1, b1, w2, b2)
                        : feedforward_sublayer(x, w1, b1, w2, b2));
        break;
      }
      case 10: {
        const Var<T> x = pick(), up = pick(), gate = pick(), down = pick();
        const auto bu = maybe(), bg = maybe(), bd = maybe();
        if (in_.flag()) {
          keep(gated_feedforward(x, up, gate, down, bu, bg, bd, pick_activation()));
        } else {
          static const char* const k_names[] = {"silu",         "relu",  "gelu", "gelu_tanh",
                                                "gelu_sigmoid", "swish", ""};
          keep(gated_feedforward(x, up, gate, down, bu, bg, bd, k_names[in_.below(7)]));
        }
        break;
      }
      case 11: {  // backward, with the right dy most of the time
        const Var<T> y = pick();
        if (in_.flag()) {
          y.tape().backward(y);
        } else {
          const Shape s = in_.below(4) == 0 ? shape() : y.shape();
          y.tape().backward(y, values(s));
        }
        break;
      }
      case 12: {
        const std::size_t what = in_.below(3);
        if (what == 0) tape.clear();
        if (what == 1) tape.release();
        if (what == 2) tape.zero_grad();
        break;
      }
      case 13:
        tape.set_grad_enabled(in_.flag());
        break;
      case 14:
        tape.set_detect_anomaly(in_.flag());
        break;
      case 15: {  // a Parameter changes shape, possibly while recorded
        if (params_.empty()) break;
        Parameter<T>& p = params_[in_.below(params_.size())];
        if (in_.flag())
          p.value = values(shape());
        else
          p.zero_grad();
        break;
      }
      case 16: {  // a module forward (modules outlive the tapes: their Parameters are recorded)
        const std::size_t in = in_.below(5), out = in_.below(5);
        if (in_.flag()) {
          if (linears_.size() < 8) linears_.emplace_back(in, out, in_.flag());
          keep(linears_[in_.below(linears_.size())](pick()));
        } else {
          if (gateds_.size() < 8)
            gateds_.emplace_back(in, out + 1, in, pick_activation(), GatedBias::all());
          keep(gateds_[in_.below(gateds_.size())](pick()));
        }
        break;
      }
      case 17: {  // an optimizer step over some Parameters
        std::vector<Parameter<T>*> ps = parameter_pointers();
        const std::size_t kind = in_.below(4);
        if (kind == 0) optim::SGD<T>(ps, optim::SGDOptions(in_.number()).momentum(0.5)).step();
        if (kind == 1) optim::Adam<T>(ps, optim::AdamOptions(in_.number())).step();
        if (kind == 2) optim::AdamW<T>(ps, optim::AdamWOptions(in_.number()).amsgrad(true)).step();
        if (kind == 3) {
          const double max_norm = in_.number();
          optim::clip_grad_norm<T>(ps, max_norm, in_.number());
        }
        break;
      }
      case 18: {  // read a value or a gradient
        const Var<T> v = pick();
        if (in_.flag())
          (void)v.grad();
        else
          (void)v.value();
        break;
      }
      default:
        model_op();
        break;
    }
  }

  // Small torch-style integers for dims, sizes and indices: -2 to 5, so that
  // negative and out-of-range values come up but no request is ever large.
  std::int64_t small() { return static_cast<std::int64_t>(in_.below(8)) - 2; }
  std::vector<std::int64_t> small_list() {
    std::vector<std::int64_t> v(in_.below(4));
    for (auto& d : v) d = small();
    return v;
  }
  Indices indices() {
    const Shape s = shape();
    Indices index = Indices::from_shape(s);
    for (auto& i : index) i = small();
    return index;
  }
  Reduction reduction() { return static_cast<Reduction>(in_.below(4)); }  // 3: invalid

  // The ops models are made of: math, division and scalars, softmax and the
  // losses, norms, dropout, shapes, indexing, matmul, embedding, reductions
  // along axes; and, as
  // before, an op under NoGradGuard on the other tape.
  void model_op() {
    const std::size_t family = in_.below(10);
    switch (family) {
      case 0: {
        const Var<T> x = pick();
        const std::size_t which = in_.below(12);
        const T a = static_cast<T>(in_.number());
        const T b = static_cast<T>(in_.number());
        switch (which) {
          case 0:
            keep(exp(x));
            break;
          case 1:
            keep(log(x));
            break;
          case 2:
            keep(sqrt(x));
            break;
          case 3:
            keep(rsqrt(x));
            break;
          case 4:
            keep(tanh(x));
            break;
          case 5:
            keep(sigmoid(x));
            break;
          case 6:
            keep(abs(x));
            break;
          case 7:
            keep(square(x));
            break;
          case 8:
            keep(pow(x, a));
            break;
          case 9:
            keep(clamp(x, a, b));
            break;
          case 10:
            keep(clamp_min(x, a));
            break;
          default:
            keep(clamp_max(x, b));
            break;
        }
        break;
      }
      case 1: {
        const Var<T> x = pick(), y = pick();
        const T s = static_cast<T>(in_.number());
        const std::size_t which = in_.below(5);
        if (which == 0) keep(div(x, y));
        if (which == 1) keep(x + s);
        if (which == 2) keep(s - x);
        if (which == 3) keep(x / s);
        if (which == 4) keep(s / x);
        break;
      }
      case 2: {
        const Var<T> x = pick();
        const std::int64_t dim = small();
        const std::size_t which = in_.below(5);
        if (which == 0) keep(softmax(x, dim));
        if (which == 1) keep(log_softmax(x, dim));
        if (which == 2 || which == 3) {
          CrossEntropyOptions options;
          options.ignore_index = in_.flag() ? -100 : small();
          options.label_smoothing = in_.flag() ? 0.0 : in_.number();
          options.reduction = reduction();
          if (which == 2) {
            const Indices target = indices();
            keep(cross_entropy(x, target, options));
          } else {
            keep(cross_entropy(x, pick(), options));
          }
        }
        if (which == 4) {
          NllLossOptions options;
          options.reduction = reduction();
          const Indices target = indices();
          keep(nll_loss(x, target, options));
        }
        break;
      }
      case 3: {
        const Var<T> x = pick();
        const auto w = maybe();
        const auto b = maybe();
        const double eps = in_.flag() ? 1e-5 : in_.number();
        const std::size_t which = in_.below(3);
        if (which == 0) keep(layer_norm(x, w, b, eps));
        if (which == 1) keep(rms_norm(x, w, eps));
        if (which == 2) {
          const double p = in_.number();
          const bool training = in_.flag();
          DropoutKey key;
          key.seed = in_.byte();
          key.step = in_.byte();
          key.first_element = in_.byte();
          keep(dropout(x, p, training, key));
        }
        break;
      }
      case 4: {
        const Var<T> x = pick();
        const std::size_t which = in_.below(5);
        if (which == 0) keep(reshape(x, small_list()));
        if (which == 1) {
          const std::int64_t start = small();
          keep(flatten(x, start, small()));
        }
        if (which == 2) keep(permute(x, small_list()));
        if (which == 3) {
          const std::int64_t d0 = small();
          keep(transpose(x, d0, small()));
        }
        if (which == 4) keep(expand(x, small_list()));
        break;
      }
      case 5: {
        const Var<T> x = pick();
        const std::int64_t dim = small();
        const std::size_t which = in_.below(5);
        if (which == 0) {
          const std::int64_t start = small(), stop = small();
          keep(slice(x, dim, start, stop, small()));
        }
        if (which == 1 || which == 2) {
          std::vector<Var<T>> xs = {x};
          for (std::size_t k = in_.below(3); k > 0; --k) xs.push_back(pick());
          keep(which == 1 ? concat(xs, dim) : stack(xs, dim));
        }
        if (which == 3 || which == 4) {
          const std::vector<Var<T>> pieces =
              which == 3 ? split(x, small(), dim) : chunk(x, small(), dim);
          for (const Var<T>& piece : pieces) keep(piece);
        }
        break;
      }
      case 6: {
        const Var<T> x = pick();
        const std::int64_t dim = small();
        const Indices index = indices();
        keep(in_.flag() ? index_select(x, dim, index) : gather(x, dim, index));
        break;
      }
      case 7: {
        const Var<T> a = pick();
        if (in_.flag()) {
          keep(matmul(a, pick()));
        } else {
          const Indices index = indices();
          const std::optional<std::int64_t> padding =
              in_.flag() ? std::nullopt : std::optional<std::int64_t>(small());
          keep(embedding(index, a, padding));
        }
        break;
      }
      case 8: {
        const Var<T> x = pick();
        const std::vector<std::int64_t> dims = small_list();
        const bool keepdim = in_.flag();
        const std::size_t which = in_.below(8);
        if (which == 0) keep(sum(x, dims, keepdim));
        if (which == 1) keep(mean(x, dims, keepdim));
        if (which == 2) keep(var(x, dims, small(), keepdim));
        if (which == 3) keep(logsumexp(x, dims, keepdim));
        if (which == 4) keep(amax(x, dims, keepdim));
        if (which == 5) keep(amin(x, dims, keepdim));
        if (which >= 6) {
          const ValuesIndices<T> r =
              which == 6 ? max(x, small(), keepdim) : min(x, small(), keepdim);
          keep(r.values);
        }
        break;
      }
      default: {  // with NoGradGuard, an op on the other tape
        NoGradGuard<T> no_grad(tapes_[1]);
        keep(relu(pick()));
        break;
      }
    }
  }

  // Every leaf still recorded holds the values it was given.
  void check_leaves() {
    for (const Leaf& leaf : leaves_) {
      const xt::xarray<T>* value = nullptr;
      try {
        value = &leaf.var.value();
      } catch (const std::logic_error&) {
        continue;  // its tape was cleared
      }
      require(bit_equal(*value, leaf.copy), "a recorded leaf changed");
    }
  }

  Bytes& in_;
  // Parameters and modules are declared first, so they outlive the tapes
  // that point at them.
  std::deque<Parameter<T>> params_;  // stable addresses for tape.param
  std::deque<Linear<T>> linears_;
  std::deque<GatedFFN<T>> gateds_;
  Tape<T> tapes_[2];
  std::vector<Var<T>> vars_;
  std::vector<Leaf> leaves_;
};

// The first byte picks float or double.
inline void tape_one(const std::uint8_t* data, std::size_t size) {
  Bytes in(data, size);
  if (in.flag()) {
    TapeProgram<float>(in).run();
  } else {
    TapeProgram<double>(in).run();
  }
}

// ---------------------------------------------------------------- sizes

// Interprets the input as up to 16 calls of the public functions whose sizes
// come from their arguments: the mask builders, split / chunk / expand /
// reshape / concat / stack, and the constructors of Linear, Embedding, the
// norms, MultiheadAttention, CausalSelfAttention, TransformerBlock, GPT and
// KvCache, with GPT::generate, make_cache and KvCache::check_append. Each size
// is small (0 to 4) or huge (2^40 and up, to SIZE_MAX): any nonzero product
// with a huge factor is then past every machine's memory and must be refused
// with std::invalid_argument (engine/checked_size.hpp), never wrap, crash or
// end in std::bad_alloc; a failed op records nothing.
// The most pieces a split or chunk of the sizes harness may make.
inline constexpr std::size_t k_sizes_max_pieces = 4096;

template <class T>
class SizesProgram {
 public:
  explicit SizesProgram(Bytes& in) : in_(in) {}

  void run() {
    for (int step = 0; step < 16 && !in_.empty(); ++step) {
      const std::size_t op = in_.below(12);
      documented([&] { call(op); }, /*io=*/false);
    }
  }

 private:
  // f() records on the tape: when it throws, it must have recorded nothing.
  template <class F>
  void on_tape(F&& f) {
    const std::size_t before = tape_.size();
    if (!documented(f, /*io=*/false))
      require(tape_.size() == before, "a failed call recorded on the tape");
  }

  std::size_t size() {
    static constexpr std::size_t k_huge[] = {std::size_t{1} << 40, (std::size_t{1} << 40) + 1,
                                             std::size_t{1} << 48, std::size_t{1} << 62,
                                             std::size_t{1} << 63, (std::size_t{1} << 63) - 1,
                                             SIZE_MAX - 1,         SIZE_MAX};
    const std::uint8_t b = in_.byte();
    return b >= 224 ? k_huge[b % 8] : b % 5;
  }
  // A torch-style size or dim: -2 to 4, or huge (up to INT64_MAX).
  std::int64_t signed_size() {
    const std::size_t s = size();
    if (s > 4) return static_cast<std::int64_t>(std::min<std::size_t>(s, INT64_MAX));
    return static_cast<std::int64_t>(in_.below(7)) - 2;
  }
  std::vector<std::int64_t> signed_list() {
    std::vector<std::int64_t> v(in_.below(5));
    for (auto& s : v) s = signed_size();
    return v;
  }
  // A small leaf of up to 3 axes of 0 to 3, now and then an axis of 2^62 with a 0 beside it.
  Var<T> leaf() {
    Shape s(in_.below(4));
    for (auto& d : s) d = in_.below(4);
    if (!s.empty() && in_.below(8) == 0) {
      s[0] = std::size_t{1} << 62;
      s.back() = 0;
    }
    return tape_.leaf(xt::xarray<T>(xt::zeros<T>(s)));
  }
  // The exact product of y's shape is the number of elements it holds.
  static void check_size(const Var<T>& y) {
    detail::WideCount count(1);
    for (const std::size_t d : y.shape()) count *= d;
    require(count.fits() && count.value() == y.value().size(), "a result's size wrapped");
  }
  std::optional<std::size_t> maybe_size() {
    if (in_.flag()) return std::nullopt;
    return size();
  }

  void call(std::size_t op) {
    switch (op) {
      case 0: {
        const std::size_t rows = size(), cols = size();
        const xt::xarray<bool> m = causal_mask(rows, cols, signed_size());
        require(detail::WideCount(rows) * cols <= m.size(), "causal_mask gave another size");
        break;
      }
      case 1: {
        Indices lengths = Indices::from_shape({in_.below(4)});
        for (auto& l : lengths) l = static_cast<std::int64_t>(in_.below(5));
        const std::size_t max_length = size();
        const xt::xarray<bool> m = length_mask(lengths, max_length);
        require(detail::WideCount(lengths.size()) * max_length <= m.size(),
                "length_mask gave another size");
        break;
      }
      case 2: {
        const Var<T> x = leaf();
        const std::size_t which = in_.below(3);
        if (which == 0) {
          const std::vector<std::int64_t> sizes = signed_list();
          const std::int64_t dim = signed_size();
          on_tape([&] { split(x, sizes, dim); });
        } else {
          const std::int64_t n = signed_size();
          const std::int64_t dim = signed_size();
          // Millions of pieces of a 2^62-row empty x are real nodes, within
          // memory but not within the fuzzer's: such calls are skipped.
          const std::size_t rows = x.dimension() == 0 ? 0 : x.shape()[0];
          if (n > 0 && rows / static_cast<std::size_t>(n) > k_sizes_max_pieces) break;
          on_tape([&] { which == 1 ? split(x, n, dim) : chunk(x, n, dim); });
        }
        break;
      }
      case 3: {
        const Var<T> x = leaf();
        const std::vector<std::int64_t> shape = signed_list();
        const bool expanding = in_.flag();
        on_tape([&] { check_size(expanding ? expand(x, shape) : reshape(x, shape)); });
        break;
      }
      case 4: {
        const Var<T> x = leaf();
        const std::vector<Var<T>> xs(1 + in_.below(8), x);
        const std::int64_t dim = signed_size();
        const bool concatenating = in_.flag();
        on_tape([&] { check_size(concatenating ? concat(xs, dim) : stack(xs, dim)); });
        break;
      }
      case 5: {
        const std::size_t a = size(), b = size();
        const std::size_t which = in_.below(5);
        if (which == 0) Linear<T>(a, b, in_.flag());
        if (which == 1) Embedding<T>(a, b);
        if (which == 2) LayerNorm<T>{a};
        if (which == 3) RMSNorm<T>{a};
        if (which == 4) GatedFFN<T>(a, b, size());
        break;
      }
      case 6: {
        const std::size_t embed_dim = size(), heads = size();
        MultiheadAttentionOptions options;
        options.bias = in_.flag();
        MultiheadAttention<T> mha(embed_dim, heads, options);
        const Var<T> x = tape_.leaf(xt::xarray<T>(xt::ones<T>(Shape{1, 2, embed_dim})));
        on_tape([&] { mha.forward(x); });
        break;
      }
      case 7: {
        const std::size_t n_embd = size();
        CausalSelfAttentionOptions options;
        options.n_heads = size();
        options.n_kv_heads = maybe_size();
        options.layout = in_.flag() ? AttentionLayout::gpt2 : AttentionLayout::llama;
        options.rotary = options.layout == AttentionLayout::llama;
        CausalSelfAttention<T> attention(n_embd, options);
        break;
      }
      case 8: {
        const std::size_t n_embd = size();
        TransformerBlockOptions options;
        options.style = in_.flag() ? GPTStyle::gpt2 : GPTStyle::llama;
        options.n_heads = size();
        options.n_kv_heads = maybe_size();
        options.ffn_hidden = maybe_size();
        TransformerBlock<T> block(n_embd, options);
        break;
      }
      case 9: {
        GPTConfig c;
        c.style = in_.flag() ? GPTStyle::gpt2 : GPTStyle::llama;
        c.vocab_size = size();
        c.block_size = size();
        c.n_layer = size();
        c.n_head = size();
        c.n_embd = size();
        c.n_kv_head = maybe_size();
        c.ffn_hidden = maybe_size();
        c.tie_embeddings = in_.flag();
        const GPT<T> gpt(c);
        std::vector<std::int64_t> prompt(1 + in_.below(3));
        for (auto& t : prompt) t = static_cast<std::int64_t>(in_.below(5));
        const std::size_t n = size(), batch = size();
        if (in_.flag()) {
          const auto out = gpt.generate(prompt, n, 0.0);
          require(out.size() == prompt.size() + n, "generate gave another number of tokens");
        } else {
          gpt.make_cache(batch);
        }
        break;
      }
      case 10: {
        const std::size_t batch = size(), layers = size(), heads = size(), dim = size();
        KvCache<T> cache(batch, layers, heads, dim, size());
        const std::size_t new_positions = size();
        cache.check_append("KvCache::append", in_.below(layers + 1), new_positions);
        const std::size_t t = std::min<std::size_t>(new_positions, 4);
        const xt::xarray<T> k = xt::zeros<T>(Shape{batch, heads, t, dim});
        cache.append(0, k, k);
        cache.check_append("KvCache::append", 0, size());
        break;
      }
      default: {
        const std::size_t nf = size(), nx = size();
        Conv1D<T> conv(nf, nx);
        break;
      }
    }
  }

  Bytes& in_;
  Tape<T> tape_;
};

// The first byte picks float or double.
inline void sizes_one(const std::uint8_t* data, std::size_t size) {
  Bytes in(data, size);
  if (in.flag()) {
    SizesProgram<float>(in).run();
  } else {
    SizesProgram<double>(in).run();
  }
}

}  // namespace xtgrad::fuzz
