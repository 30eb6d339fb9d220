// The access log's writer thread. What the workers hand over is queued (at most `max_lines`
// lines: past that the oldest batches are dropped and their lines counted) and the thread takes
// everything queued at once and writes it with writev. Through spdlog's asynchronous logger a
// line cost a queue entry, a wake-up of the logging thread and a write of its own: in
// loadtest/run.sh's `logged` scenario (both proxies write an access log) sluice took 1.44-1.53x
// nginx's CPU per request, 1.04-1.12x this way (loadtest/results/access_log_thirteenth.md).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace sluice::observe {

class AccessWriter {
public:
    // `fd`: where lines go (stdout's, or a file's, which it then owns and closes); `path`: the
    // file's name, for reopen (empty: stdout, never reopened).
    AccessWriter(int fd, std::string path, std::size_t max_lines);
    AccessWriter(const AccessWriter&) = delete;
    AccessWriter& operator=(const AccessWriter&) = delete;
    ~AccessWriter();

    // `text`: whole lines, each with its newline; `lines` of them. Never waits for a write.
    void submit(std::string text, std::size_t lines);
    // Opens the file by its name again before the next write (logrotate moved it).
    void reopen();
    // Writes what is queued, then ends the thread; later submissions are ignored.
    void stop();
    // Lines dropped: queued past max_lines, or not written (the disk full, stdout's reader gone).
    std::uint64_t dropped() const;

private:
    struct Batch {
        std::string text;
        std::size_t lines;
    };
    void run();
    void reopen_file();
    void write_all(std::deque<Batch>& batches);

    int fd_;
    const std::string path_;
    const std::size_t max_lines_;
    mutable std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<Batch> queue_;
    std::size_t queued_lines_ = 0;
    std::uint64_t dropped_ = 0;
    bool reopen_ = false;
    bool stopped_ = false;
    std::thread thread_;  // (last: started once the rest is set)
};

}  // namespace sluice::observe
