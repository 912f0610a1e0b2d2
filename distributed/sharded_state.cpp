// ShardedOptimizer's checkpoints: the shard's state dict, and the
// unsharded (consolidated) one gathered to rank 0 or cut into shards.
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>

#include "../engine/errors.hpp"
#include "sharded_optimizer.hpp"

namespace xtgrad::distributed {

namespace {

constexpr const char* k_zero_keys[] = {"zero.world_size", "zero.rank", "zero.begin", "zero.end",
                                       "zero.elements"};

// "state.<i>.<field>" -> (i, field); false for any other key.
bool split_state_key(const std::string& key, std::size_t& index, std::string& field) {
  if (key.compare(0, 6, "state.") != 0) return false;
  const std::size_t dot = key.find('.', 6);
  if (dot == std::string::npos || dot == 6) return false;
  for (std::size_t k = 6; k < dot; ++k)
    if (key[k] < '0' || key[k] > '9') return false;
  index = std::stoul(key.substr(6, dot - 6));
  field = key.substr(dot + 1);
  return true;
}

// A StateDict as bytes and back, for the gather to rank 0 (same machine
// word order on every rank of a job).
void put(std::string& out, const void* data, std::size_t n) {
  out.append(static_cast<const char*>(data), n);
}
void put_u64(std::string& out, std::uint64_t v) {
  put(out, &v, sizeof v);
}
void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}
struct Cursor {
  const char* at;
  void get(void* data, std::size_t n) {
    std::memcpy(data, at, n);
    at += n;
  }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    get(&v, sizeof v);
    return v;
  }
  std::string str() {
    const std::size_t n = u64();
    std::string s(at, n);
    at += n;
    return s;
  }
};

template <class T>
std::string serialize(const StateDict<T>& state) {
  std::string out;
  put_u64(out, state.arrays.size());
  for (const auto& [key, a] : state.arrays) {
    put_str(out, key);
    put_u64(out, a.dimension());
    for (const std::size_t d : a.shape()) put_u64(out, d);
    put(out, a.data(), a.size() * sizeof(T));
  }
  put_u64(out, state.integers.size());
  for (const auto& [key, v] : state.integers) put_str(out, key), put(out, &v, sizeof v);
  put_u64(out, state.reals.size());
  for (const auto& [key, v] : state.reals) put_str(out, key), put(out, &v, sizeof v);
  put_u64(out, state.strings.size());
  for (const auto& [key, v] : state.strings) put_str(out, key), put_str(out, v);
  return out;
}

template <class T>
StateDict<T> deserialize(Cursor c) {
  StateDict<T> state;
  for (std::uint64_t n = c.u64(); n-- > 0;) {
    const std::string key = c.str();
    std::vector<std::size_t> shape(c.u64());
    for (std::size_t& d : shape) d = c.u64();
    xt::xarray<T> a = xt::zeros<T>(shape);
    c.get(a.data(), a.size() * sizeof(T));
    state.arrays.emplace(key, std::move(a));
  }
  for (std::uint64_t n = c.u64(); n-- > 0;) {
    const std::string key = c.str();
    c.get(&state.integers[key], sizeof(std::int64_t));
  }
  for (std::uint64_t n = c.u64(); n-- > 0;) {
    const std::string key = c.str();
    c.get(&state.reals[key], sizeof(double));
  }
  for (std::uint64_t n = c.u64(); n-- > 0;) {
    const std::string key = c.str();
    state.strings[key] = c.str();
  }
  return state;
}

// shard_from_full's checks: `full` holds no "zero." entry (it is no shard)...
template <class T>
void check_unsharded(const StateDict<T>& full, const std::string& function) {
  for (const auto& [key, v] : full.integers)
    if (key.compare(0, 5, "zero.") == 0)
      xtgrad::detail::fail_argument(function, "state",
                                    "is a shard ('" + key +
                                        "'), expected an unsharded state "
                                        "(consolidated_state_dict); shards go to load_state_dict");
}

// ... and its "group.<g>.params" entries count the parameters of the optimizer's groups.
template <class T>
void check_group_sizes(const optim::Optimizer<T>& optimizer, const StateDict<T>& full,
                       const std::string& function) {
  for (std::size_t g = 0; g < optimizer.group_count(); ++g) {
    const std::string key = optim::detail::group_key(g, "params");
    const auto it = full.integers.find(key);
    const auto expected =
        static_cast<std::int64_t>(optimizer.group_end(g) - optimizer.group_begin(g));
    if (it == full.integers.end() || it->second != expected)
      xtgrad::detail::fail_argument(function, key,
                                    "must be " + std::to_string(expected) +
                                        " (the parameters of group " + std::to_string(g) + ")");
  }
}

// Scalar entries of a full state into a shard: parameter J's "state.<J>.<field>"
// becomes "state.<i>.<field>" of the piece i = piece(key, J) this rank holds
// of it (none, SIZE_MAX: another rank's, left out); any other entry is copied.
template <class V, class Piece>
void shard_scalars(const std::map<std::string, V>& full, std::map<std::string, V>& shard,
                   const Piece& piece) {
  std::size_t J = 0;
  std::string field;
  for (const auto& [key, v] : full) {
    if (!split_state_key(key, J, field)) {
      shard[key] = v;
    } else if (const std::size_t i = piece(key, J); i != SIZE_MAX) {
      shard[optim::detail::state_key(i, field.c_str())] = v;
    }
  }
}

}  // namespace

template <class T>
StateDict<T> ShardedOptimizer<T>::state_dict() const {
  StateDict<T> state = inner_->state_dict();
  for (std::size_t g = 0; g < this->group_count(); ++g)
    state.reals[optim::detail::group_key(g, "lr")] = this->lr(g);
  state.integers["zero.world_size"] = static_cast<std::int64_t>(layout_.ranks());
  state.integers["zero.rank"] = static_cast<std::int64_t>(rank());
  state.integers["zero.begin"] = static_cast<std::int64_t>(layout_.begin(rank()));
  state.integers["zero.end"] = static_cast<std::int64_t>(layout_.end(rank()));
  state.integers["zero.elements"] = static_cast<std::int64_t>(layout_.elements());
  return state;
}

template <class T>
StateDict<T> ShardedOptimizer<T>::strip_zero_entries(const StateDict<T>& state,
                                                     const std::string& function) const {
  const std::int64_t expected[] = {static_cast<std::int64_t>(layout_.ranks()),
                                   static_cast<std::int64_t>(rank()),
                                   static_cast<std::int64_t>(layout_.begin(rank())),
                                   static_cast<std::int64_t>(layout_.end(rank())),
                                   static_cast<std::int64_t>(layout_.elements())};
  StateDict<T> out = state;
  for (std::size_t k = 0; k < 5; ++k) {
    const auto it = state.integers.find(k_zero_keys[k]);
    if (it == state.integers.end())
      xtgrad::detail::fail_argument(function, "state",
                                    std::string("has no entry '") + k_zero_keys[k] +
                                        "': not a shard of a ShardedOptimizer (an unsharded "
                                        "state goes to load_consolidated_state_dict)");
    if (it->second != expected[k])
      xtgrad::detail::fail_argument(
          function, "state",
          std::string("is a shard with ") + k_zero_keys[k] + " = " + std::to_string(it->second) +
              ", expected " + std::to_string(expected[k]) + " (rank " + std::to_string(rank()) +
              " of " + std::to_string(layout_.ranks()) +
              " over the same parameters; load each rank's own shard, or save a consolidated "
              "state to change the number of ranks)");
    out.integers.erase(k_zero_keys[k]);
  }
  return out;
}

template <class T>
void ShardedOptimizer<T>::check_state_dict(const StateDict<T>& state) const {
  const std::string function = "ShardedOptimizer::load_state_dict";
  agree([&] { inner_->check_state_dict(strip_zero_entries(state, function)); }, "load_state_dict");
}

template <class T>
void ShardedOptimizer<T>::load_state_dict(const StateDict<T>& state) {
  const std::string function = "ShardedOptimizer::load_state_dict";
  StateDict<T> shard;
  agree(
      [&] {
        shard = strip_zero_entries(state, function);
        inner_->check_state_dict(shard);
      },
      "load_state_dict");
  inner_->load_state_dict(shard);
  for (std::size_t g = 0; g < this->group_count(); ++g) this->set_lr(g, inner_->lr(g));
}

template <class T>
void ShardedOptimizer<T>::refuse_rank_local(const char* function) const {
  const std::vector<std::uint64_t> counts = sync_.communicator().all_gather(local_.size());
  for (std::size_t r = 0; r < counts.size(); ++r)
    if (counts[r] != 0)
      throw std::logic_error(std::string("ShardedOptimizer::") + function + ": rank " +
                             std::to_string(r) + " holds " + std::to_string(counts[r]) +
                             " rank-local parameters (ZeroOptions::rank_local), which a "
                             "consolidated state cannot hold; save and load each rank's own "
                             "state with state_dict() and load_state_dict()");
}

template <class T>
StateDict<T> ShardedOptimizer<T>::consolidated_state_dict() const {
  refuse_rank_local("consolidated_state_dict");
  const Communicator& comm = sync_.communicator();
  const std::vector<std::string> shards = comm.gather(serialize(state_dict()), 0);
  StateDict<T> full;
  if (comm.rank() != 0) return full;

  const auto& params = this->parameters();
  for (std::size_t r = 0; r < layout_.ranks(); ++r) {
    const StateDict<T> shard = deserialize<T>(Cursor{shards[r].data()});
    // Rank r's pieces in its optimizer's order (as the constructor lists them).
    std::vector<detail::ShardPiece> pieces;
    const auto flat = layout_.pieces(r);
    for (std::size_t g = 0; g < this->group_count(); ++g)
      for (const auto& piece : flat)
        if (this->group_of(index_in_optimizer_[piece.parameter]) == g) pieces.push_back(piece);
    if (r == 0) {  // the groups' entries, with the whole groups' sizes
      full.strings = shard.strings;
      full.reals = shard.reals;
      for (const auto& [key, v] : shard.integers)
        if (key.compare(0, 6, "state.") != 0 && key.compare(0, 5, "zero.") != 0)
          full.integers[key] = v;
      for (std::size_t g = 0; g < this->group_count(); ++g)
        full.integers[optim::detail::group_key(g, "params")] =
            static_cast<std::int64_t>(this->group_end(g) - this->group_begin(g));
    }
    std::size_t i = 0;
    std::string field;
    for (const auto& [key, a] : shard.arrays) {
      if (!split_state_key(key, i, field)) continue;
      const detail::ShardPiece& piece = pieces.at(i);
      const std::size_t J = index_in_optimizer_[piece.parameter];
      const std::string out = optim::detail::state_key(J, field.c_str());
      auto it = full.arrays.find(out);
      if (it == full.arrays.end())
        it = full.arrays.emplace(out, xt::xarray<T>(xt::zeros<T>(params[J]->value.shape()))).first;
      std::copy_n(a.data(), piece.length, it->second.data() + piece.offset);
    }
    for (const auto& [key, v] : shard.integers)
      if (split_state_key(key, i, field))
        full.integers[optim::detail::state_key(index_in_optimizer_[pieces.at(i).parameter],
                                               field.c_str())] = v;
    for (const auto& [key, v] : shard.reals)
      if (split_state_key(key, i, field))
        full.reals[optim::detail::state_key(index_in_optimizer_[pieces.at(i).parameter],
                                            field.c_str())] = v;
  }
  return full;
}

template <class T>
StateDict<T> ShardedOptimizer<T>::shard_from_full(const StateDict<T>& full,
                                                  const std::string& function) const {
  check_unsharded(full, function);
  check_group_sizes(*this, full, function);
  const auto& params = this->parameters();
  // Which of this rank's pieces holds each parameter (at most one).
  std::vector<std::size_t> piece_of(params.size(), SIZE_MAX);
  for (std::size_t i = 0; i < pieces_.size(); ++i)
    piece_of[index_in_optimizer_[pieces_[i].parameter]] = i;
  const auto piece = [&](const std::string& key, std::size_t J) -> std::size_t {
    if (J >= params.size())
      xtgrad::detail::fail_argument(function, "state",
                                    "has the unexpected entry '" + key + "' (there are " +
                                        std::to_string(params.size()) + " parameters)");
    return piece_of[J];
  };
  StateDict<T> shard;
  std::size_t J = 0;
  std::string field;
  for (const auto& [key, a] : full.arrays) {
    if (!split_state_key(key, J, field)) {
      shard.arrays[key] = a;
      continue;
    }
    const std::size_t i = piece(key, J);
    if (a.shape() != params[J]->value.shape())
      xtgrad::detail::fail_argument(function, key,
                                    "has shape " + xtgrad::detail::shape_str(a.shape()) +
                                        ", expected its parameter's " +
                                        xtgrad::detail::shape_str(params[J]->value.shape()));
    if (i == SIZE_MAX) continue;  // another rank's
    xt::xarray<T> part = xt::zeros<T>({pieces_[i].length});
    std::copy_n(a.data() + pieces_[i].offset, pieces_[i].length, part.data());
    shard.arrays[optim::detail::state_key(i, field.c_str())] = std::move(part);
  }
  shard_scalars(full.integers, shard.integers, piece);
  shard_scalars(full.reals, shard.reals, piece);
  shard.strings = full.strings;
  for (std::size_t g = 0; g < this->group_count(); ++g)
    shard.integers[optim::detail::group_key(g, "params")] =
        static_cast<std::int64_t>(inner_->group_end(g) - inner_->group_begin(g));
  return shard;
}

template <class T>
void ShardedOptimizer<T>::load_consolidated_state_dict(const StateDict<T>& state) {
  const std::string function = "ShardedOptimizer::load_consolidated_state_dict";
  refuse_rank_local("load_consolidated_state_dict");
  StateDict<T> shard;
  agree(
      [&] {
        shard = shard_from_full(state, function);
        inner_->check_state_dict(shard);
      },
      "load_consolidated_state_dict");
  inner_->load_state_dict(shard);
  for (std::size_t g = 0; g < this->group_count(); ++g) this->set_lr(g, inner_->lr(g));
}

template StateDict<float> ShardedOptimizer<float>::state_dict() const;
template StateDict<float> ShardedOptimizer<float>::strip_zero_entries(const StateDict<float>&,
                                                                      const std::string&) const;
template void ShardedOptimizer<float>::check_state_dict(const StateDict<float>&) const;
template void ShardedOptimizer<float>::load_state_dict(const StateDict<float>&);
template StateDict<float> ShardedOptimizer<float>::consolidated_state_dict() const;
template StateDict<float> ShardedOptimizer<float>::shard_from_full(const StateDict<float>&,
                                                                   const std::string&) const;
template void ShardedOptimizer<float>::load_consolidated_state_dict(const StateDict<float>&);
template void ShardedOptimizer<float>::refuse_rank_local(const char*) const;
template StateDict<double> ShardedOptimizer<double>::state_dict() const;
template StateDict<double> ShardedOptimizer<double>::strip_zero_entries(const StateDict<double>&,
                                                                        const std::string&) const;
template void ShardedOptimizer<double>::check_state_dict(const StateDict<double>&) const;
template void ShardedOptimizer<double>::load_state_dict(const StateDict<double>&);
template StateDict<double> ShardedOptimizer<double>::consolidated_state_dict() const;
template StateDict<double> ShardedOptimizer<double>::shard_from_full(const StateDict<double>&,
                                                                     const std::string&) const;
template void ShardedOptimizer<double>::load_consolidated_state_dict(const StateDict<double>&);
template void ShardedOptimizer<double>::refuse_rank_local(const char*) const;

}  // namespace xtgrad::distributed
