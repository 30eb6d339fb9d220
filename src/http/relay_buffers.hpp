// The buffers that carry bodies between a client and an upstream, reused within one worker
// (no locks): a request borrows one while it is forwarded, so neither a coroutine frame nor
// an idle connection holds 32 KB.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace sluice::http {

class RelayBuffers {
public:
    static constexpr std::size_t buffer_size = 32 * 1024;

    class Lease {
    public:
        Lease(RelayBuffers& owner, std::unique_ptr<char[]> buffer) : owner_(&owner), buffer_(std::move(buffer)) {}
        Lease(Lease&& other) noexcept = default;
        Lease& operator=(Lease&&) = delete;
        ~Lease() {
            if (buffer_) owner_->give_back(std::move(buffer_));
        }
        char* data() { return buffer_.get(); }
        static constexpr std::size_t size() { return buffer_size; }

    private:
        RelayBuffers* owner_;
        std::unique_ptr<char[]> buffer_;
    };

    Lease take() {
        if (free_.empty()) return Lease(*this, std::make_unique_for_overwrite<char[]>(buffer_size));
        auto buffer = std::move(free_.back());
        free_.pop_back();
        return Lease(*this, std::move(buffer));
    }

    std::size_t idle() const { return free_.size(); }

private:
    // Buffers kept for reuse at most; more in use at once are freed when given back.
    static constexpr std::size_t max_idle = 64;

    void give_back(std::unique_ptr<char[]> buffer) {
        if (free_.size() < max_idle) free_.push_back(std::move(buffer));
    }

    std::vector<std::unique_ptr<char[]>> free_;
};

}  // namespace sluice::http
