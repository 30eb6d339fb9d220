// What a store calls with its decision: a move-only callable taking a Decision, once.
// Unlike std::function it takes move-only callables (a coroutine's completion handler) and
// keeps small ones inline: the request path passes one per decision and allocates nothing.
#pragma once

#include <cassert>
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

#include "limit/decision.hpp"

namespace sluice::limit {

class DecisionCallback {
public:
    DecisionCallback() noexcept = default;

    template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, DecisionCallback> &&
                                                std::is_invocable_v<std::decay_t<F>&, Decision>>>
    DecisionCallback(F&& f) {  // NOLINT(google-explicit-constructor): a lambda converts, as to std::function
        using Stored = std::decay_t<F>;
        if constexpr (fits_inline<Stored>()) {
            ::new (static_cast<void*>(storage_)) Stored(std::forward<F>(f));
            ops_ = &inline_ops<Stored>;
        } else {
            ::new (static_cast<void*>(storage_)) Stored*(new Stored(std::forward<F>(f)));
            ops_ = &heap_ops<Stored>;
        }
    }

    DecisionCallback(DecisionCallback&& other) noexcept : ops_(std::exchange(other.ops_, nullptr)) {
        if (ops_) ops_->move(storage_, other.storage_);
    }
    DecisionCallback& operator=(DecisionCallback&& other) noexcept {
        if (this != &other) {
            reset();
            ops_ = std::exchange(other.ops_, nullptr);
            if (ops_) ops_->move(storage_, other.storage_);
        }
        return *this;
    }
    DecisionCallback(const DecisionCallback&) = delete;
    DecisionCallback& operator=(const DecisionCallback&) = delete;
    ~DecisionCallback() { reset(); }

    explicit operator bool() const noexcept { return ops_ != nullptr; }

    // Calls it (it must hold one). It stays callable only if the callable itself allows.
    void operator()(Decision&& decision) {
        assert(ops_ != nullptr);
        ops_->invoke(storage_, std::move(decision));
    }

private:
    static constexpr std::size_t inline_size = 4 * sizeof(void*);

    struct Ops {
        void (*invoke)(void* self, Decision&& decision);
        void (*move)(void* to, void* from) noexcept;  // and destroys `from`'s
        void (*destroy)(void* self) noexcept;
    };

    template <class T>
    static constexpr bool fits_inline() {
        return sizeof(T) <= inline_size && alignof(T) <= alignof(std::max_align_t) &&
               std::is_nothrow_move_constructible_v<T>;
    }

    template <class T>
    static constexpr Ops inline_ops{
        [](void* self, Decision&& decision) { (*std::launder(static_cast<T*>(self)))(std::move(decision)); },
        [](void* to, void* from) noexcept {
            auto* source = std::launder(static_cast<T*>(from));
            ::new (to) T(std::move(*source));
            source->~T();
        },
        [](void* self) noexcept { std::launder(static_cast<T*>(self))->~T(); },
    };

    template <class T>
    static constexpr Ops heap_ops{
        [](void* self, Decision&& decision) { (**std::launder(static_cast<T**>(self)))(std::move(decision)); },
        [](void* to, void* from) noexcept { ::new (to) T*(*std::launder(static_cast<T**>(from))); },
        [](void* self) noexcept { delete *std::launder(static_cast<T**>(self)); },
    };

    void reset() noexcept {
        if (ops_) std::exchange(ops_, nullptr)->destroy(storage_);
    }

    alignas(std::max_align_t) unsigned char storage_[inline_size];
    const Ops* ops_ = nullptr;
};

}  // namespace sluice::limit
