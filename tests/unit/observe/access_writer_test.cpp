// The access log's writer thread: batches arrive whole and in order, a full queue drops the
// oldest lines and counts every one of them, a reopen follows logrotate's move, and lines it
// cannot write are counted, never lost silently.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "observe/access_writer.hpp"

using sluice::observe::AccessWriter;

namespace {

std::string temp_path(const char* name) {
    return (std::filesystem::temp_directory_path() / (std::string("sluice-aw-") + std::to_string(::getpid()) + "-" + name))
        .string();
}

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

int open_file(const std::string& path) { return ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644); }

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream s(text);
    for (std::string line; std::getline(s, line);) out.push_back(line);
    return out;
}

}  // namespace

TEST_CASE("access writer: batches arrive whole and in order, from several threads", "[access_writer]") {
    const auto path = temp_path("order");
    std::remove(path.c_str());
    const int fd = open_file(path);
    REQUIRE(fd >= 0);
    {
        AccessWriter writer(fd, path, 16384);
        std::vector<std::thread> threads;
        for (int t = 0; t < 3; ++t)
            threads.emplace_back([&writer, t] {
                for (int i = 0; i < 500; ++i)
                    writer.submit("t" + std::to_string(t) + " " + std::to_string(i) + " a\nt" + std::to_string(t) + " " +
                                      std::to_string(i) + " b\n",
                                  2);
            });
        for (auto& th : threads) th.join();
        writer.stop();
        CHECK(writer.dropped() == 0);
        writer.submit("after stop\n", 1);  // ignored
    }
    const auto lines = lines_of(read_file(path));
    REQUIRE(lines.size() == 3000);
    std::vector<int> next(3, 0);
    for (std::size_t i = 0; i < lines.size(); i += 2) {
        // A batch's two lines stay together; each thread's batches in the order it made them.
        const int t = lines[i][1] - '0';
        REQUIRE(t >= 0);
        REQUIRE(t < 3);
        const std::string head = "t" + std::to_string(t) + " " + std::to_string(next[static_cast<std::size_t>(t)]);
        CHECK(lines[i] == head + " a");
        CHECK(lines[i + 1] == head + " b");
        ++next[static_cast<std::size_t>(t)];
    }
    CHECK(next == std::vector<int>{500, 500, 500});
    std::remove(path.c_str());
}

TEST_CASE("access writer: a full queue drops the oldest lines and counts every one", "[access_writer]") {
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    ::fcntl(pipe_fds[1], F_SETPIPE_SZ, 4096);
    const int capacity = ::fcntl(pipe_fds[1], F_GETPIPE_SZ);
    REQUIRE(capacity > 0);
    // Nobody reads yet: the writer's first write (a line longer than the pipe holds) fills it
    // and waits there; what comes meanwhile queues, at most 100 lines.
    std::size_t submitted = 0;
    std::uint64_t dropped = 0;
    std::string received;
    {
        AccessWriter writer(pipe_fds[1], "", 100);
        const std::string filler(static_cast<std::size_t>(capacity) * 2, 'x');
        writer.submit(filler + "\n", 1);
        ++submitted;
        int held = 0;
        for (int i = 0; i < 2000 && held < capacity; ++i) {
            ::ioctl(pipe_fds[0], FIONREAD, &held);
            if (held < capacity) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        REQUIRE(held == capacity);  // the writer waits in its write, with the filler alone
        for (int i = 0; i < 300; ++i) {
            writer.submit("line " + std::to_string(i) + "\n", 1);
            ++submitted;
        }
        std::thread reader([&received, fd = pipe_fds[0]] {
            char buffer[4096];
            while (true) {
                const auto n = ::read(fd, buffer, sizeof buffer);
                if (n <= 0) break;
                received.append(buffer, static_cast<std::size_t>(n));
            }
        });
        writer.stop();
        dropped = writer.dropped();
        ::close(pipe_fds[1]);  // (not the writer's: no path)
        reader.join();
    }
    ::close(pipe_fds[0]);
    const auto lines = lines_of(received);
    // Every line is either written or counted; the newest ones are the ones kept.
    CHECK(lines.size() + dropped == submitted);
    CHECK(dropped == 200);
    CHECK(lines.size() == 101);
    REQUIRE_FALSE(lines.empty());
    CHECK(lines.back() == "line 299");
}

TEST_CASE("access writer: reopen writes to the file by its name again (logrotate)", "[access_writer]") {
    const auto path = temp_path("rotate");
    const auto moved = path + ".1";
    std::remove(path.c_str());
    std::remove(moved.c_str());
    const int fd = open_file(path);
    REQUIRE(fd >= 0);
    AccessWriter writer(fd, path, 16384);
    writer.submit("before\n", 1);
    for (int i = 0; i < 500 && read_file(path) != "before\n"; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    REQUIRE(read_file(path) == "before\n");
    REQUIRE(std::rename(path.c_str(), moved.c_str()) == 0);
    writer.reopen();
    writer.submit("after\n", 1);
    writer.stop();
    CHECK(read_file(moved) == "before\n");
    CHECK(read_file(path) == "after\n");
    CHECK(writer.dropped() == 0);
    std::remove(path.c_str());
    std::remove(moved.c_str());
}

TEST_CASE("access writer: lines it cannot write are counted as dropped", "[access_writer]") {
    std::signal(SIGPIPE, SIG_IGN);  // (as the server does)
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    ::close(pipe_fds[0]);  // the reader of stdout went away
    AccessWriter writer(pipe_fds[1], "", 16384);
    writer.submit("a\nb\nc\n", 3);
    writer.submit("d\n", 1);
    writer.stop();
    CHECK(writer.dropped() == 4);
    ::close(pipe_fds[1]);
}
