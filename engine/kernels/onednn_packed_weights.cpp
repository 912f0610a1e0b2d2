#if XTGRAD_HAVE_ONEDNN

#include "onednn_packed_weights.hpp"

#include <algorithm>
#include <functional>
#include <list>
#include <mutex>
#include <unordered_map>

namespace xtgrad::detail {

namespace {

bool same_piece(const PackedWeightKey& x, const PackedWeightKey& y) {
  return x.id == y.id && x.version == y.version && x.data == y.data && x.offset == y.offset &&
         x.k == y.k && x.n == y.n && x.ldb == y.ldb && x.transpose_b == y.transpose_b &&
         x.precision == y.precision && x.layout == y.layout;
}

struct KeyHash {
  std::size_t operator()(const PackedWeightKey& key) const {
    // the layout is compared, not hashed: pieces that differ only in it are rare
    std::size_t h = std::hash<std::uint64_t>()(key.id);
    for (const std::size_t v :
         {std::size_t(key.version), reinterpret_cast<std::size_t>(key.data), key.offset, key.k,
          key.n, key.ldb, std::size_t(key.transpose_b), static_cast<std::size_t>(key.precision)})
      h = h * 1000003u ^ std::hash<std::size_t>()(v);
    return h;
  }
};

struct KeyEqual {
  bool operator()(const PackedWeightKey& x, const PackedWeightKey& y) const {
    return same_piece(x, y);
  }
};

struct Slot {
  PackedWeightKey key;
  std::shared_ptr<PackedWeight> weight;  // null while only noted
};

// Most recently used first; the map points into the list.
struct Cache {
  std::mutex mutex;
  std::list<Slot> order;
  std::unordered_map<PackedWeightKey, std::list<Slot>::iterator, KeyHash, KeyEqual> index;
  std::size_t bytes = 0;

  // Removes *it; the entry after it.
  std::list<Slot>::iterator erase(std::list<Slot>::iterator it) {
    if (it->weight) bytes -= it->key.layout.get_size();
    index.erase(it->key);
    return order.erase(it);
  }

  // Every entry of the same weight at an older version.
  void drop_older(const PackedWeightKey& key) {
    for (auto it = order.begin(); it != order.end();)
      it = it->key.id == key.id && it->key.version < key.version ? erase(it) : std::next(it);
  }

  // The least recently used first, until the bounds hold; `keep` stays.
  void evict(const Slot* keep) {
    for (auto it = order.end();
         (bytes > k_packed_weight_bytes || order.size() > k_packed_weight_entries) &&
         it != order.begin();) {
      --it;
      if (&*it != keep) it = erase(it);
    }
  }
};

Cache& cache() {
  static Cache instance;
  return instance;
}

}  // namespace

std::shared_ptr<PackedWeight> find_packed_weight(const PackedWeightKey& key, bool first_use,
                                                 bool& pack) {
  pack = false;
  Cache& c = cache();
  const std::lock_guard<std::mutex> lock(c.mutex);
  const auto found = c.index.find(key);
  if (found != c.index.end()) {
    c.order.splice(c.order.begin(), c.order, found->second);
  } else {
    c.drop_older(key);
    c.order.push_front(Slot{key, nullptr});
    c.index.emplace(key, c.order.begin());
    if (!first_use) {  // noted; packed at the next use
      c.evict(&c.order.front());
      return nullptr;
    }
  }
  Slot& slot = c.order.front();
  if (key.layout.get_size() > k_packed_weight_bytes) return nullptr;  // never fits: unpacked
  if (slot.weight)
    return slot.weight->ready.load(std::memory_order_acquire) ? slot.weight : nullptr;
  // Claimed here; the caller allocates and packs it outside the lock.
  slot.weight = std::make_shared<PackedWeight>();
  c.bytes += key.layout.get_size();
  std::shared_ptr<PackedWeight> claimed = slot.weight;
  c.evict(&slot);
  pack = true;
  return claimed;
}

PackedWeightStats packed_weight_stats() {
  Cache& c = cache();
  const std::lock_guard<std::mutex> lock(c.mutex);
  std::size_t packed = 0;
  for (const Slot& s : c.order) packed += s.weight ? 1 : 0;
  return {c.order.size(), packed, c.bytes};
}

void clear_packed_weights() {
  Cache& c = cache();
  const std::lock_guard<std::mutex> lock(c.mutex);
  c.index.clear();
  c.order.clear();
  c.bytes = 0;
}

}  // namespace xtgrad::detail

#endif
