// Test support: run an io_context until something happens, with a time limit.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

#include <boost/asio/io_context.hpp>

namespace sluice::test {

// Runs one handler, or waits up to `slice`; sleeps a little when there is no work at all.
inline void run_slice(boost::asio::io_context& io_context, std::chrono::milliseconds slice) {
    io_context.restart();
    if (io_context.run_one_for(slice) == 0 && io_context.stopped())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// Runs handlers until `done()` or `limit` elapsed; returns done().
inline bool run_until(boost::asio::io_context& io_context, const std::function<bool()>& done,
                      std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) run_slice(io_context, std::chrono::milliseconds(5));
    return done();
}

// Runs handlers for `duration`, whatever happens.
inline void run_for(boost::asio::io_context& io_context, std::chrono::milliseconds duration) {
    run_until(io_context, [] { return false; }, duration);
}

}  // namespace sluice::test
