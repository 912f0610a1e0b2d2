#include "profiler.hpp"

#include <algorithm>
#include <array>
#include <string>

#include "errors.hpp"
#include "profiler_format.hpp"
#include "tape.hpp"

namespace xtgrad {

namespace {

constexpr const char* k_outside_name = "[outside ops]";

constexpr std::array<std::pair<ProfileColumn, const char*>, 10> k_column_names{{
    {ProfileColumn::name, "name"},
    {ProfileColumn::calls, "calls"},
    {ProfileColumn::self, "self"},
    {ProfileColumn::total, "total"},
    {ProfileColumn::average, "average"},
    {ProfileColumn::share, "share"},
    {ProfileColumn::flops, "flops"},
    {ProfileColumn::gflops, "gflops"},
    {ProfileColumn::bytes, "bytes"},
    {ProfileColumn::gbytes, "gbytes"},
}};

double sort_key(const ProfileRow& row, ProfileColumn by) {
  switch (by) {
    case ProfileColumn::calls:
      return double(row.calls);
    case ProfileColumn::total:
      return row.total_seconds;
    case ProfileColumn::average:
      return row.average_seconds();
    case ProfileColumn::share:
      return row.share;
    case ProfileColumn::flops:
      return row.flops;
    case ProfileColumn::gflops:
      return row.gflops_per_second();
    case ProfileColumn::bytes:
      return row.bytes;
    case ProfileColumn::gbytes:
      return row.gbytes_per_second();
    case ProfileColumn::name:
    case ProfileColumn::self:
      break;
  }
  return row.self_seconds;
}

}  // namespace

ProfileColumn parse_profile_column(std::string_view name) {
  std::string valid;
  for (const auto& [column, text] : k_column_names) {
    if (name == text) return column;
    valid += (valid.empty() ? "" : ", ") + std::string(text);
  }
  detail::fail_value("parse_profile_column", "unknown column " + detail::quoted(std::string(name)) +
                                                 "; valid columns are " + valid);
}

void Profiler::reset() {
  open_.clear();
  totals_.clear();
  by_pointer_.clear();
  by_text_.clear();
  steps_ = 0;
  step_seconds_ = 0;
  in_step_ = false;
}

void Profiler::begin_step() {
  if (in_step_)
    detail::fail_logic("Profiler::begin_step",
                       "a step is already open; call end_step() first (steps do not nest)");
  in_step_ = true;
  // No op is open between steps: what is left was opened by an op that threw.
  open_.erase(
      std::remove_if(open_.begin(), open_.end(), [](const Open& o) { return o.owner != nullptr; }),
      open_.end());
  step_start_ = Clock::now();
}

void Profiler::end_step() {
  const Clock::time_point now = Clock::now();
  if (!in_step_)
    detail::fail_logic("Profiler::end_step", "no step is open; call begin_step() first");
  in_step_ = false;
  ++steps_;
  step_seconds_ += std::chrono::duration<double>(now - step_start_).count();
}

double Profiler::self_seconds() const {
  std::int64_t ns = 0;
  for (const Totals& t : totals_) ns += t.self_ns;
  return double(ns) * 1e-9;
}

Profiler::Totals& Profiler::totals_for(const char* name, ProfileRow::Kind kind) {
  // Op names are literals (Tape::record), so their address identifies them;
  // a region's name may be a temporary string, so it is looked up as text.
  const bool by_address = kind != ProfileRow::Kind::region;
  if (by_address) {
    const auto fast = by_pointer_.find({name, kind});
    if (fast != by_pointer_.end()) return totals_[fast->second];
  }
  const std::string text = std::to_string(int(kind)) + name;
  auto slow = by_text_.find(text);
  if (slow == by_text_.end()) {
    std::string row_name = name;
    if (kind == ProfileRow::Kind::backward) row_name += ".backward";
    const CostClass cost_class =
        kind == ProfileRow::Kind::region ? CostClass::none : detail::cost_class(name);
    totals_.push_back({std::move(row_name), kind, cost_class});
    slow = by_text_.emplace(text, totals_.size() - 1).first;
  }
  if (by_address) by_pointer_.emplace(std::pair{name, kind}, slow->second);
  return totals_[slow->second];
}

void Profiler::open(const void* owner, std::size_t index, const char* name, ProfileRow::Kind kind) {
  open_.push_back({owner, index, name, kind, Clock::now()});
}

Profiler::Totals* Profiler::close(const void* owner, std::size_t index, ProfileRow::Kind kind) {
  const Clock::time_point now = Clock::now();
  // The innermost matching entry; any above it never closed (an op that
  // threw between record and set_backward) and are dropped untimed.
  std::size_t k = open_.size();
  while (k > 0) {
    const Open& o = open_[k - 1];
    if (o.owner == owner && o.index == index && o.kind == kind) break;
    --k;
  }
  if (k == 0) return nullptr;  // opened before a reset(), or never opened
  const Open entry = open_[k - 1];
  open_.resize(k - 1);
  const std::int64_t total_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now - entry.start).count();
  Totals& t = totals_for(entry.name, kind);
  ++t.calls;
  t.total_ns += total_ns;
  t.self_ns += total_ns - entry.inner_ns;
  if (!open_.empty()) open_.back().inner_ns += total_ns;
  return &t;
}

void Profiler::region_begin(const char* name) {
  if (name == nullptr) detail::fail_argument("ProfileRegion", "name", "is null");
  open(nullptr, 0, name, ProfileRow::Kind::region);
}

void Profiler::region_end() {
  // Regions are scopes: the innermost open one ends.
  close(nullptr, 0, ProfileRow::Kind::region);
}

template <class T>
Profiler::Cost Profiler::cost_model(const Tape<T>& tape, std::size_t index, bool backward) {
  return detail::node_cost(detail::cost_class(tape.node_op(index)), tape, index, backward);
}

template <class T>
void Profiler::forward_begin(const Tape<T>& tape, std::size_t index) {
  open(&tape, index, tape.node_op(index), ProfileRow::Kind::forward);
}

template <class T>
void Profiler::forward_end(const Tape<T>& tape, std::size_t index) {
  if (Totals* t = close(&tape, index, ProfileRow::Kind::forward)) {
    const Cost cost = detail::node_cost(t->cost_class, tape, index, false);  // clock stopped
    t->flops += cost.flops;
    t->bytes += cost.bytes;
  }
}

template <class T>
void Profiler::backward_begin(const Tape<T>& tape, std::size_t index) {
  open(&tape, index, tape.node_op(index), ProfileRow::Kind::backward);
}

template <class T>
void Profiler::backward_end(const Tape<T>& tape, std::size_t index) {
  if (Totals* t = close(&tape, index, ProfileRow::Kind::backward)) {
    const Cost cost = detail::node_cost(t->cost_class, tape, index, true);
    t->flops += cost.flops;
    t->bytes += cost.bytes;
  }
}

std::string Profiler::table(ProfileColumn by, std::size_t limit) const {
  std::vector<ProfileRow> all = rows(by);
  if (limit && all.size() > limit) all.resize(limit);
  return detail::profile_table(all, {steps_, step_seconds_, self_seconds()});
}

std::string Profiler::csv(ProfileColumn by) const {
  return detail::profile_csv(rows(by));
}

std::string Profiler::json(ProfileColumn by) const {
  return detail::profile_json(rows(by), {steps_, step_seconds_, self_seconds()});
}

std::vector<ProfileRow> Profiler::rows(ProfileColumn by) const {
  std::int64_t self_ns = 0;
  for (const Totals& t : totals_) self_ns += t.self_ns;
  const double self_total = double(self_ns) * 1e-9;
  const double base = steps_ ? step_seconds_ : self_total;
  std::vector<ProfileRow> out;
  out.reserve(totals_.size() + 1);
  for (const Totals& t : totals_) {
    ProfileRow row;
    row.name = t.name;
    row.kind = t.kind;
    row.calls = t.calls;
    row.self_seconds = double(t.self_ns) * 1e-9;
    row.total_seconds = double(t.total_ns) * 1e-9;
    row.share = base > 0 ? row.self_seconds / base : 0.0;
    row.flops = t.flops;
    row.bytes = t.bytes;
    out.push_back(std::move(row));
  }
  if (steps_) {
    ProfileRow outside;
    outside.name = k_outside_name;
    outside.kind = ProfileRow::Kind::outside;
    outside.calls = steps_;
    outside.self_seconds = outside.total_seconds = std::max(0.0, step_seconds_ - self_total);
    outside.share = base > 0 ? outside.self_seconds / base : 0.0;
    out.push_back(std::move(outside));
  }
  if (by == ProfileColumn::name)
    std::stable_sort(out.begin(), out.end(),
                     [](const ProfileRow& a, const ProfileRow& b) { return a.name < b.name; });
  else
    std::stable_sort(out.begin(), out.end(), [by](const ProfileRow& a, const ProfileRow& b) {
      return sort_key(a, by) > sort_key(b, by);
    });
  return out;
}

template <class T>
ProfilerGuard<T>::ProfilerGuard(Tape<T>& tape, Profiler& profiler)
    : tape_(tape), previous_(tape.profiler()) {
  tape_.set_profiler(&profiler);
}

template <class T>
ProfilerGuard<T>::~ProfilerGuard() {
  tape_.set_profiler(previous_);
}

#define XTGRAD_INSTANTIATE_PROFILER(T)                                             \
  template void Profiler::forward_begin(const Tape<T>&, std::size_t);              \
  template void Profiler::forward_end(const Tape<T>&, std::size_t);                \
  template void Profiler::backward_begin(const Tape<T>&, std::size_t);             \
  template void Profiler::backward_end(const Tape<T>&, std::size_t);               \
  template Profiler::Cost Profiler::cost_model(const Tape<T>&, std::size_t, bool); \
  template class ProfilerGuard<T>;
XTGRAD_INSTANTIATE_PROFILER(float)
XTGRAD_INSTANTIATE_PROFILER(double)
#undef XTGRAD_INSTANTIATE_PROFILER

}  // namespace xtgrad
