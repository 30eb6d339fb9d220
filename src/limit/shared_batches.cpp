#include "limit/shared_batches.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

namespace sluice::limit {

namespace asio = boost::asio;

SharedBatches::SharedBatches(std::size_t max_requests) : max_requests_(max_requests) {}

std::uint64_t SharedBatches::join(asio::io_context& io_context, Deliver deliver, Wake wake) {
    std::lock_guard lock(mutex_);
    members_.push_back(Member{++members_made_, &io_context, std::move(deliver), std::move(wake)});
    return members_made_;
}

void SharedBatches::leave(std::uint64_t member) {
    std::lock_guard lock(mutex_);
    std::erase_if(members_, [member](const Member& m) { return m.id == member; });
    std::erase_if(waiting_, [member](const Part& part) { return part.member == member; });
    if (!waiting_.empty()) wake_oldest();
}

const SharedBatches::Member* SharedBatches::member(std::uint64_t id) const {
    for (const auto& m : members_)
        if (m.id == id) return &m;
    return nullptr;
}

SharedBatches::Member* SharedBatches::member(std::uint64_t id) {
    for (auto& m : members_)
        if (m.id == id) return &m;
    return nullptr;
}

void SharedBatches::wake_oldest() {
    // Posted under the lock: a member that has not left yet has its io_context still.
    if (const auto* m = member(waiting_.front().member)) asio::post(*m->io_context, m->wake);
}

std::vector<SharedBatches::Part> SharedBatches::withdraw(std::uint64_t member) {
    std::vector<Part> own;
    std::lock_guard lock(mutex_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (it->member != member) {
            ++it;
            continue;
        }
        own.push_back(std::move(*it));
        it = waiting_.erase(it);
    }
    return own;
}

std::vector<SharedBatches::Answered> SharedBatches::take_kept(std::uint64_t member) {
    std::lock_guard lock(mutex_);
    auto* m = this->member(member);
    if (m == nullptr) return {};
    return std::exchange(m->kept, {});
}

std::shared_ptr<SharedBatches::Call> SharedBatches::offer(std::uint64_t member, std::optional<Part> part,
                                                          bool take_others, bool force) {
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lock(mutex_);
    // Parts whose every decision was answered by its deadline: sending them would count
    // requests already answered (they are their owners' to forget).
    std::erase_if(waiting_, [now](const Part& p) { return p.expires <= now; });
    const bool busy = std::any_of(in_flight_.begin(), in_flight_.end(),
                                  [member](const auto& entry) { return entry.second == member; });
    if (busy && !force) {
        if (part) waiting_.push_back(std::move(*part));
        return nullptr;
    }
    auto call = std::make_shared<Call>();
    std::size_t requests = 0;
    auto add = [&](Part&& p) {
        call->first_key.push_back(call->keys);
        call->keys += p.keys.size();
        requests += p.args.requests();
        call->parts.push_back(std::move(p));
    };
    if (part) add(std::move(*part));
    if (take_others)
        while (!waiting_.empty() &&
               (call->parts.empty() || requests + waiting_.front().args.requests() <= max_requests_)) {
            if (waiting_.front().member != member) ++carried_;
            add(std::move(waiting_.front()));
            waiting_.pop_front();
        }
    if (call->parts.empty()) return nullptr;
    call->number = ++calls_made_;
    call->sender = member;
    in_flight_.emplace_back(call->number, member);
    return call;
}

bool SharedBatches::answered(const std::shared_ptr<Call>& call, std::uint64_t here, std::vector<Answered>& ready) {
    std::shared_ptr<const Call> done = call;
    std::lock_guard lock(mutex_);
    std::erase_if(in_flight_, [&](const auto& entry) { return entry.first == call->number; });
    for (std::size_t i = 0; i < done->parts.size(); ++i) {
        const auto owner = done->parts[i].member;
        if (owner == here) continue;
        auto* m = member(owner);
        if (m == nullptr) continue;
        const bool busy = std::any_of(in_flight_.begin(), in_flight_.end(),
                                      [owner](const auto& entry) { return entry.second == owner; });
        if (busy) m->kept.emplace_back(done, i);
        else asio::post(*m->io_context, [deliver = m->deliver, done, i] { deliver(done, i); });
    }
    if (here != 0)
        if (auto* m = member(here)) {
            std::move(m->kept.begin(), m->kept.end(), std::back_inserter(ready));
            m->kept.clear();
        }
    if (waiting_.empty()) return false;
    if (here == 0) wake_oldest();
    return true;
}

std::size_t SharedBatches::waiting() const {
    std::lock_guard lock(mutex_);
    return waiting_.size();
}

std::uint64_t SharedBatches::carried() const {
    std::lock_guard lock(mutex_);
    return carried_;
}

std::size_t SharedBatches::in_flight() const {
    std::lock_guard lock(mutex_);
    return in_flight_.size();
}

}  // namespace sluice::limit
