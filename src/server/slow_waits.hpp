// Work a request needs only when a wait lasts: the client watch while the upstream answers.
// Most upstream answers come within a turn or two of the event loop, and a watch costs a
// receive and an asynchronous operation per request (about 940 instructions and a system
// call, measured); so a request links a SlowWait when the wait starts and unlinks it when it
// ends, and the worker's 50 ms tick fires those still linked after a full tick: 50 to 100 ms
// into the wait. Intrusive, one thread (the worker's): linking and unlinking allocate nothing.
// Pure: no sockets, no timers (the worker calls tick()).
#pragma once

#include <cstdint>

namespace sluice::server {

class SlowWaits;

class SlowWait {
public:
    SlowWait() = default;
    SlowWait(const SlowWait&) = delete;
    SlowWait& operator=(const SlowWait&) = delete;

    bool linked() const { return list_ != nullptr; }
    inline void unlink();

protected:
    ~SlowWait() { unlink(); }

private:
    friend class SlowWaits;
    // The wait lasted: called once, unlinked first.
    virtual void fire() = 0;

    SlowWaits* list_ = nullptr;
    SlowWait* prev_ = nullptr;
    SlowWait* next_ = nullptr;
    std::uint64_t tick_ = 0;  // the list's tick when it was linked
};

class SlowWaits {
public:
    SlowWaits() = default;
    SlowWaits(const SlowWaits&) = delete;
    SlowWaits& operator=(const SlowWaits&) = delete;
    ~SlowWaits() {
        while (head_) head_->unlink();
    }

    // Links `wait` at the end (unlinked first, wherever it was).
    void add(SlowWait& wait) {
        wait.unlink();
        wait.list_ = this;
        wait.tick_ = tick_;
        wait.prev_ = tail_;
        wait.next_ = nullptr;
        (tail_ ? tail_->next_ : head_) = &wait;
        tail_ = &wait;
    }

    // One tick: fires, oldest first, the waits linked before the previous tick (each has
    // waited at least a whole period). A fired wait may link itself or others again: those
    // wait for later ticks.
    void tick() {
        const std::uint64_t due = tick_++;
        while (head_ && head_->tick_ < due) {
            SlowWait& wait = *head_;
            wait.unlink();
            wait.fire();
        }
    }

    // Fires every wait now (the worker stops ticking).
    void fire_all() {
        const std::uint64_t end = tick_++;
        while (head_ && head_->tick_ <= end) {
            SlowWait& wait = *head_;
            wait.unlink();
            wait.fire();
        }
    }

    bool empty() const { return head_ == nullptr; }

private:
    friend class SlowWait;
    SlowWait* head_ = nullptr;
    SlowWait* tail_ = nullptr;
    std::uint64_t tick_ = 0;
};

inline void SlowWait::unlink() {
    if (!list_) return;
    (prev_ ? prev_->next_ : list_->head_) = next_;
    (next_ ? next_->prev_ : list_->tail_) = prev_;
    list_ = nullptr;
    prev_ = next_ = nullptr;
}

}  // namespace sluice::server
