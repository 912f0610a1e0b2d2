#pragma once
// detail::InlineFunction<void(Args...), InlineBytes>: a move-only callable
// that keeps its capture inline; the storage of a tape node's rules
// (BackwardFn in backward_fn.hpp, GradRule in grad_rule.hpp).
//
// std::function allocates for any capture larger than two pointers, which is
// nearly every rule of every op on every step. InlineFunction keeps a capture
// of up to InlineBytes inside the object; a larger one goes to a heap block
// that the object keeps when its callable is reset or replaced, and reuses for
// the next callable that fits. A node of a warm tape (Tape::clear keeps its
// nodes) therefore records its rules without allocating, whatever the size of
// their captures. Moving an InlineFunction swaps heap blocks, never copies or
// allocates; a capture must be nothrow move constructible to live inline and
// at most max_align_t-aligned.

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace xtgrad::detail {

template <class Signature, std::size_t InlineBytes>
class InlineFunction;

template <class... Args, std::size_t InlineBytes>
class InlineFunction<void(Args...), InlineBytes> {
 public:
  static constexpr std::size_t k_inline_bytes = InlineBytes;

  InlineFunction() = default;
  InlineFunction(std::nullptr_t) {}  // NOLINT: like std::function, an empty rule
  template <class F, std::enable_if_t<!std::is_same_v<std::decay_t<F>, InlineFunction> &&
                                          !std::is_same_v<std::decay_t<F>, std::nullptr_t>,
                                      int> = 0>
  InlineFunction(F&& f) {  // NOLINT: implicit, as std::function
    emplace(std::forward<F>(f));
  }
  InlineFunction(InlineFunction&& other) noexcept { take(other); }
  InlineFunction& operator=(InlineFunction&& other) noexcept {
    if (this != &other) take(other);
    return *this;
  }
  InlineFunction& operator=(std::nullptr_t) noexcept {
    reset();
    return *this;
  }
  InlineFunction(const InlineFunction&) = delete;
  InlineFunction& operator=(const InlineFunction&) = delete;
  ~InlineFunction() {
    reset();
    ::operator delete(heap_);
  }

  // Replaces the callable by f (an InlineFunction is moved in, nullptr
  // empties), reusing the kept heap block when f is too large for the inline
  // storage but fits the block.
  template <class F>
  void emplace(F&& f) {
    using Fn = std::decay_t<F>;
    if constexpr (std::is_same_v<Fn, InlineFunction>) {
      *this = std::move(f);
    } else if constexpr (std::is_same_v<Fn, std::nullptr_t>) {
      reset();
    } else {
      static_assert(std::is_invocable_v<Fn&, Args...>,
                    "xtgrad: a rule must be callable with the arguments of its signature");
      static_assert(alignof(Fn) <= alignof(std::max_align_t),
                    "xtgrad: a rule's capture may be at most max_align_t-aligned");
      reset();
      constexpr bool fits_inline =
          sizeof(Fn) <= InlineBytes && std::is_nothrow_move_constructible_v<Fn>;
      void* where = inline_;
      if constexpr (!fits_inline) {
        if (heap_bytes_ < sizeof(Fn)) {
          void* block = ::operator new(sizeof(Fn));  // may throw: *this stays empty
          ::operator delete(heap_);
          heap_ = block;
          heap_bytes_ = sizeof(Fn);
        }
        where = heap_;
      }
      ::new (where) Fn(std::forward<F>(f));
      ops_ = &ops_for<Fn, fits_inline>;
    }
  }

  // Destroys the callable (and what it captured); keeps the heap block.
  void reset() noexcept {
    if (ops_) ops_->destroy(object());
    ops_ = nullptr;
  }
  // reset(), and frees the heap block too.
  void release() noexcept {
    reset();
    ::operator delete(heap_);
    heap_ = nullptr;
    heap_bytes_ = 0;
  }

  explicit operator bool() const noexcept { return ops_ != nullptr; }
  friend bool operator==(const InlineFunction& f, std::nullptr_t) noexcept { return !f; }
  friend bool operator!=(const InlineFunction& f, std::nullptr_t) noexcept { return bool(f); }

  // Calls the rule; it must not be empty.
  void operator()(Args... args) const { ops_->invoke(object(), std::forward<Args>(args)...); }

 private:
  struct Ops {
    void (*invoke)(void* object, Args... args);
    void (*move_inline)(void* from, void* to) noexcept;  // inline objects only
    void (*destroy)(void* object) noexcept;
    bool is_inline;
  };

  template <class Fn, bool Inline>
  static constexpr Ops ops_for{
      [](void* object, Args... args) { (*static_cast<Fn*>(object))(std::forward<Args>(args)...); },
      [](void* from, void* to) noexcept {
        if constexpr (Inline) {
          ::new (to) Fn(std::move(*static_cast<Fn*>(from)));
          static_cast<Fn*>(from)->~Fn();
        }
      },
      [](void* object) noexcept { static_cast<Fn*>(object)->~Fn(); }, Inline};

  void* object() const noexcept { return ops_->is_inline ? static_cast<void*>(inline_) : heap_; }

  // Takes other's callable; the heap blocks are swapped, so that neither side
  // frees or allocates.
  void take(InlineFunction& other) noexcept {
    reset();
    std::swap(heap_, other.heap_);
    std::swap(heap_bytes_, other.heap_bytes_);
    ops_ = other.ops_;
    if (ops_ && ops_->is_inline) ops_->move_inline(other.inline_, inline_);
    other.ops_ = nullptr;
  }

  alignas(std::max_align_t) mutable unsigned char inline_[InlineBytes];
  void* heap_ = nullptr;
  std::size_t heap_bytes_ = 0;
  const Ops* ops_ = nullptr;
};

}  // namespace xtgrad::detail
