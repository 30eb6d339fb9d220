#include "observe/access_writer.hpp"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

namespace sluice::observe {

AccessWriter::AccessWriter(int fd, std::string path, std::size_t max_lines)
    : fd_(fd), path_(std::move(path)), max_lines_(max_lines), thread_([this] { run(); }) {}

AccessWriter::~AccessWriter() { stop(); }

void AccessWriter::submit(std::string text, std::size_t lines) {
    {
        std::lock_guard lock(mutex_);
        if (stopped_) return;
        queue_.push_back(Batch{std::move(text), lines});
        queued_lines_ += lines;
        while (queued_lines_ > max_lines_ && queue_.size() > 1) {
            dropped_ += queue_.front().lines;
            queued_lines_ -= queue_.front().lines;
            queue_.pop_front();
        }
    }
    ready_.notify_one();  // (no system call while the thread is busy writing)
}

void AccessWriter::reopen() {
    {
        std::lock_guard lock(mutex_);
        reopen_ = true;
    }
    ready_.notify_one();
}

void AccessWriter::stop() {
    {
        std::lock_guard lock(mutex_);
        if (stopped_) return;
        stopped_ = true;
    }
    ready_.notify_one();
    if (thread_.joinable()) thread_.join();
    if (!path_.empty() && fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

std::uint64_t AccessWriter::dropped() const {
    std::lock_guard lock(mutex_);
    return dropped_;
}

void AccessWriter::run() {
    std::deque<Batch> taken;
    while (true) {
        bool reopen = false;
        {
            std::unique_lock lock(mutex_);
            ready_.wait(lock, [this] { return stopped_ || reopen_ || !queue_.empty(); });
            if (queue_.empty() && !reopen_ && stopped_) return;
            taken.swap(queue_);
            queued_lines_ = 0;
            reopen = std::exchange(reopen_, false);
        }
        if (reopen) reopen_file();
        write_all(taken);
        taken.clear();
    }
}

void AccessWriter::reopen_file() {
    if (path_.empty()) return;
    const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        spdlog::warn("access log {}: cannot reopen ({}); lines go on to the file open before", path_,
                     std::strerror(errno));
        return;
    }
    ::close(fd_);
    fd_ = fd;
}

// Every batch, in order, with as few writev calls as it takes (a partial write goes on where
// it stopped).
void AccessWriter::write_all(std::deque<Batch>& batches) {
    std::vector<::iovec> pieces;
    pieces.reserve(batches.size());
    for (auto& b : batches) pieces.push_back({b.text.data(), b.text.size()});
    std::size_t at = 0;
    while (at < pieces.size()) {
        const int count = static_cast<int>(std::min<std::size_t>(pieces.size() - at, IOV_MAX));
        const ::ssize_t n = ::writev(fd_, pieces.data() + at, count);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {  // a non-blocking stdout: wait for room
                ::pollfd p{fd_, POLLOUT, 0};
                if (::poll(&p, 1, 1000) >= 0) continue;
            }
            std::size_t lost = 0;
            for (std::size_t i = at; i < batches.size(); ++i) lost += batches[i].lines;
            std::lock_guard lock(mutex_);
            dropped_ += lost;
            return;
        }
        auto left = static_cast<std::size_t>(n);
        while (at < pieces.size() && left >= pieces[at].iov_len) left -= pieces[at++].iov_len;
        if (left > 0) {
            pieces[at].iov_base = static_cast<char*>(pieces[at].iov_base) + left;
            pieces[at].iov_len -= left;
        }
    }
}

}  // namespace sluice::observe
