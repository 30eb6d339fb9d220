// RedisConnection against a real redis-server: handshake, pipelining, reconnect, health
// check, NOSCRIPT, and the promise that nothing is ever resent.
#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "../support/io_loop.hpp"
#include "../support/redis_server.hpp"
#include "redis/redis_connection.hpp"

using namespace sluice;
using namespace std::chrono_literals;
using redis::RedisConnection;
using redis::RedisConnectionOptions;
using redis::RedisError;
using redis::RedisResult;
using test::RedisServer;
using test::run_for;
using test::run_until;
using test::SyncRedis;

namespace {

RedisConnectionOptions options_for(const RedisServer& server) {
    RedisConnectionOptions options;
    options.port = server.port();
    options.backoff_min = 10ms;
    options.backoff_max = 100ms;
    return options;
}

// Collects every callback invocation of one command.
struct Calls {
    std::vector<RedisResult> results;
    RedisConnection::Callback callback() {
        return [this](RedisResult result) { results.push_back(std::move(result)); };
    }
    bool done() const { return !results.empty(); }
};

void start_and_wait_ready(boost::asio::io_context& io, RedisConnection& connection) {
    connection.start();
    REQUIRE(run_until(io, [&] { return connection.ready(); }));
}

// One evalsha of `script` on `key` with `arg`, waited for; its callback ran exactly once.
RedisResult call_once(boost::asio::io_context& io, RedisConnection& connection, RedisConnection::ScriptId script,
                      const std::string& key, const std::string& arg) {
    Calls call;
    connection.evalsha(script, {key}, {arg}, call.callback());
    REQUIRE(run_until(io, [&] { return call.done(); }));
    REQUIRE(call.results.size() == 1);
    return std::move(call.results[0]);
}

}  // namespace

TEST_CASE("redis connection: commands over TCP are pipelined and answered in order", "[redis]") {
    RedisServer server;
    boost::asio::io_context io;
    RedisConnection connection(io, options_for(server));
    start_and_wait_ready(io, connection);

    std::vector<std::int64_t> values;
    for (int i = 0; i < 100; ++i)
        connection.command({"INCR", "n"}, [&](RedisResult r) {
            REQUIRE(r.ok());
            values.push_back(r.reply.integer);
        });
    REQUIRE(values.empty());  // nothing is answered inside the call
    REQUIRE(run_until(io, [&] { return values.size() == 100; }));
    for (int i = 0; i < 100; ++i) CHECK(values[i] == i + 1);

    Calls get;
    connection.command({"GET", "missing"}, get.callback());
    REQUIRE(run_until(io, [&] { return get.done(); }));
    CHECK(get.results[0].reply.type == redis::RedisReply::Type::nil);

    Calls wrong;
    connection.command({"LPUSH", "n", "x"}, wrong.callback());
    REQUIRE(run_until(io, [&] { return wrong.done(); }));
    REQUIRE_FALSE(wrong.results[0].ok());
    CHECK(wrong.results[0].error->code == RedisError::Code::reply_error);
    CHECK_THAT(wrong.results[0].error->message, Catch::StartsWith("WRONGTYPE"));
}

TEST_CASE("redis connection: large values both ways (many partial reads and writes)", "[redis]") {
    RedisServer server;
    boost::asio::io_context io;
    RedisConnection connection(io, options_for(server));
    start_and_wait_ready(io, connection);
    const std::string big(1 << 20, 'x');
    Calls set;
    connection.command({"SET", "big", big}, set.callback());
    Calls get;
    connection.command({"GET", "big"}, get.callback());
    REQUIRE(run_until(io, [&] { return get.done(); }));
    REQUIRE(set.results.size() == 1);
    CHECK(set.results[0].ok());
    REQUIRE(get.results[0].ok());
    CHECK(get.results[0].reply.text == big);
}

TEST_CASE("redis connection: a command the socket cannot take at once is written as it drains", "[redis]") {
    // Queued commands are written at once on a connected context; what the socket does not
    // take then goes when it is writable again (32 MiB: far more than a socket buffers).
    RedisServer server;
    boost::asio::io_context io;
    RedisConnection connection(io, options_for(server));
    start_and_wait_ready(io, connection);
    const std::string huge(32u << 20, 'y');
    Calls set;
    connection.command({"SET", "huge", huge}, set.callback());
    Calls small;
    connection.command({"SET", "after", "1"}, small.callback());
    connection.flush_output();  // as the limiter does: part written now, the rest later
    Calls get;
    connection.command({"STRLEN", "huge"}, get.callback());
    REQUIRE(run_until(io, [&] { return get.done(); }));
    REQUIRE(set.results.size() == 1);
    CHECK(set.results[0].ok());
    REQUIRE(small.results.size() == 1);
    CHECK(small.results[0].ok());
    REQUIRE(get.results[0].ok());
    CHECK(get.results[0].reply.integer == static_cast<long long>(huge.size()));
}

TEST_CASE("redis connection: unix socket", "[redis]") {
    RedisServer server({}, true);
    boost::asio::io_context io;
    auto options = options_for(server);
    options.unix_path = server.unix_path();
    options.port = 1;  // not used
    RedisConnection connection(io, options);
    start_and_wait_ready(io, connection);
    Calls ping;
    connection.command({"PING"}, ping.callback());
    REQUIRE(run_until(io, [&] { return ping.done(); }));
    CHECK(ping.results[0].reply.text == "PONG");
}

TEST_CASE("redis connection: a host name is resolved before connecting", "[redis]") {
    RedisServer server;
    boost::asio::io_context io;
    auto options = options_for(server);
    options.host = "localhost";
    RedisConnection connection(io, options);
    start_and_wait_ready(io, connection);
}

TEST_CASE("redis connection: AUTH and SELECT on connect", "[redis]") {
    SECTION("password only") {
        RedisServer server({"--requirepass", "s3cret"});
        boost::asio::io_context io;
        auto options = options_for(server);
        options.password = "s3cret";
        options.database = 3;
        RedisConnection connection(io, options);
        start_and_wait_ready(io, connection);
        Calls set;
        connection.command({"SET", "where", "db3"}, set.callback());
        REQUIRE(run_until(io, [&] { return set.done(); }));
        REQUIRE(set.results[0].ok());

        SyncRedis check(server.port());
        check.must({"AUTH", "s3cret"});
        check.must({"SELECT", "3"});
        CHECK(check.text({"GET", "where"}) == "db3");
    }
    SECTION("username and password (ACL)") {
        RedisServer server;
        SyncRedis admin(server.port());
        admin.must({"ACL", "SETUSER", "limiter", "on", ">pw", "~*", "+@all"});
        admin.must({"ACL", "SETUSER", "default", "off"});
        boost::asio::io_context io;
        auto options = options_for(server);
        options.username = "limiter";
        options.password = "pw";
        RedisConnection connection(io, options);
        start_and_wait_ready(io, connection);
        Calls whoami;
        connection.command({"ACL", "WHOAMI"}, whoami.callback());
        REQUIRE(run_until(io, [&] { return whoami.done(); }));
        CHECK(whoami.results[0].reply.text == "limiter");
    }
    SECTION("a wrong or missing password never becomes ready") {
        RedisServer server({"--requirepass", "s3cret"});
        boost::asio::io_context io;
        auto options = options_for(server);
        options.password = GENERATE(std::string("wrong"), std::string());
        RedisConnection connection(io, options);
        connection.start();
        run_for(io, 300ms);
        CHECK_FALSE(connection.ready());
        CHECK(connection.ready_count() == 0);
    }
}

TEST_CASE("redis connection: commands fail at once, but not inline, while not connected", "[redis]") {
    boost::asio::io_context io;
    RedisConnectionOptions options;
    options.port = 1;  // nothing listens there
    RedisConnection connection(io, options);
    connection.start();
    Calls call;
    connection.command({"PING"}, call.callback());
    CHECK(call.results.empty());
    REQUIRE(run_until(io, [&] { return call.done(); }, 100ms));
    REQUIRE(call.results.size() == 1);
    CHECK(call.results[0].error->code == RedisError::Code::not_connected);
}

TEST_CASE("redis connection: reconnects after the server restarts", "[redis]") {
    RedisServer server;
    boost::asio::io_context io;
    RedisConnection connection(io, options_for(server));
    start_and_wait_ready(io, connection);

    server.kill();
    REQUIRE(run_until(io, [&] { return !connection.ready(); }));
    run_for(io, 300ms);  // a few failed attempts with backoff
    CHECK_FALSE(connection.ready());
    server.restart();
    REQUIRE(run_until(io, [&] { return connection.ready(); }, 3s));
    CHECK(connection.ready_count() == 2);

    Calls ping;
    connection.command({"PING"}, ping.callback());
    REQUIRE(run_until(io, [&] { return ping.done(); }));
    CHECK(ping.results[0].ok());
}

TEST_CASE("redis connection: a close right behind a reply is seen without another command", "[redis]") {
    RedisServer server;
    boost::asio::io_context io;
    auto options = options_for(server);
    options.health_interval = std::chrono::milliseconds(0);  // only the close can tell
    RedisConnection connection(io, options);
    start_and_wait_ready(io, connection);
    // Replies that drain the socket: the next receive waits without a receive first.
    for (int i = 0; i < 3; ++i) {
        Calls ping;
        connection.command({"PING"}, ping.callback());
        REQUIRE(run_until(io, [&] { return ping.done(); }));
        REQUIRE(ping.results[0].ok());
    }
    // QUIT: Redis answers +OK and closes. Both are there before the loop looks (one report),
    // and the receive that takes the reply takes fewer bytes than it asked for: the close
    // behind it must not be missed.
    Calls quit;
    connection.command({"QUIT"}, quit.callback());
    connection.flush_output();
    std::this_thread::sleep_for(100ms);
    REQUIRE(run_until(io, [&] { return quit.done(); }));
    CHECK(quit.results[0].ok());
    REQUIRE(run_until(io, [&] { return connection.ready_count() == 2; }, 3s));  // noticed, reconnected
}

TEST_CASE("redis connection: the health check drops a server that stopped answering", "[redis]") {
    RedisServer server;
    boost::asio::io_context io;
    auto options = options_for(server);
    options.health_interval = 100ms;
    options.connect_timeout = 200ms;
    RedisConnection connection(io, options);
    start_and_wait_ready(io, connection);

    run_for(io, 350ms);  // idle PINGs are answered: still the first connection
    CHECK(connection.ready());
    CHECK(connection.ready_count() == 1);

    server.suspend();
    const auto stopped_at = std::chrono::steady_clock::now();
    REQUIRE(run_until(io, [&] { return !connection.ready(); }, 2s));
    CHECK(std::chrono::steady_clock::now() - stopped_at < 500ms);  // about two intervals
    server.resume();
    REQUIRE(run_until(io, [&] { return connection.ready(); }, 3s));
    CHECK(connection.ready_count() == 2);
}

TEST_CASE("redis connection: scripts are loaded on connect; NOSCRIPT is retried once with EVAL", "[redis]") {
    RedisServer server;
    SyncRedis check(server.port());
    boost::asio::io_context io;
    RedisConnection connection(io, options_for(server));
    const auto script = connection.add_script("return redis.call('INCRBY', KEYS[1], ARGV[1])");
    start_and_wait_ready(io, connection);

    const auto sha = check.must({"SCRIPT", "LOAD", "return redis.call('INCRBY', KEYS[1], ARGV[1])"}).text;
    const auto first = call_once(io, connection, script, "counter", "5");
    REQUIRE(first.ok());
    CHECK(first.reply.integer == 5);

    check.must({"SCRIPT", "FLUSH"});
    check.must({"CONFIG", "RESETSTAT"});
    const auto second = call_once(io, connection, script, "counter", "2");
    REQUIRE(second.ok());
    CHECK(second.reply.integer == 7);  // ran exactly once
    CHECK(check.text({"GET", "counter"}) == "7");
    const auto stats = check.text({"INFO", "commandstats"});
    CHECK_THAT(stats, Catch::Contains("cmdstat_evalsha:calls=1,") && Catch::Contains("cmdstat_eval:calls=1,"));
    CHECK(check.must({"SCRIPT", "EXISTS", sha}).elements[0].integer == 1);  // EVAL cached it again

    SECTION("an error other than NOSCRIPT is not retried") {
        check.must({"SET", "text", "abc"});
        check.must({"CONFIG", "RESETSTAT"});
        Calls failing;
        connection.evalsha(script, {"text"}, {"1"}, failing.callback());
        REQUIRE(run_until(io, [&] { return failing.done(); }));
        REQUIRE(failing.results.size() == 1);
        CHECK(failing.results[0].error->code == RedisError::Code::reply_error);
        CHECK_THAT(check.text({"INFO", "commandstats"}), !Catch::Contains("cmdstat_eval:"));
    }
}

TEST_CASE("redis connection: a library is loaded on connect and called with FCALL; reloaded once when gone", "[redis]") {
    RedisServer server;
    SyncRedis check(server.port());
    boost::asio::io_context io;
    RedisConnectionOptions options = options_for(server);
    const std::string body = "redis.register_function('conn_test_incr', function(keys, args) "
                             "return redis.call('INCRBY', keys[1], args[1]) end)";
    redis::ScriptCode code{"return redis.call('INCRBY', KEYS[1], ARGV[1])", "#!lua name=conn_test\n" + body,
                           "conn_test_incr"};

    SECTION("FCALL, and after FUNCTION FLUSH: the call once more as EVAL, and the library loaded again") {
        RedisConnection connection(io, options);
        const auto script = connection.add_script(code);
        start_and_wait_ready(io, connection);
        CHECK(connection.uses_function(script));
        check.must({"CONFIG", "RESETSTAT"});
        const auto first = call_once(io, connection, script, "counter", "5");
        REQUIRE(first.ok());
        CHECK(first.reply.integer == 5);
        CHECK_THAT(check.text({"INFO", "commandstats"}),
                   Catch::Contains("cmdstat_fcall:calls=1,") && !Catch::Contains("cmdstat_evalsha"));

        check.must({"FUNCTION", "FLUSH"});
        const auto second = call_once(io, connection, script, "counter", "2");
        REQUIRE(second.ok());
        CHECK(second.reply.integer == 7);  // ran exactly once
        CHECK(check.text({"GET", "counter"}) == "7");
        CHECK_THAT(check.text({"INFO", "commandstats"}),
                   Catch::Contains("cmdstat_fcall:calls=2,") && Catch::Contains("cmdstat_eval:calls=1,"));
        CHECK(check.must({"FUNCTION", "LIST", "LIBRARYNAME", "conn_test"}).elements.size() == 1);
        // The calls after it are FCALLs again.
        const auto third = call_once(io, connection, script, "counter", "1");
        REQUIRE(third.ok());
        CHECK(third.reply.integer == 8);
        CHECK_THAT(check.text({"INFO", "commandstats"}),
                   Catch::Contains("cmdstat_fcall:calls=3,") && Catch::Contains("cmdstat_eval:calls=1,"));

        // A second connection finds the library there already: not an error.
        RedisConnection other(io, options);
        const auto again = other.add_script(code);
        start_and_wait_ready(io, other);
        CHECK(other.uses_function(again));
    }

    SECTION("a user without FUNCTION gets EVALSHA, and its scripts still work") {
        check.must({"ACL", "SETUSER", "nofunction", "on", ">pw", "~*", "+@all", "-function"});
        options.username = "nofunction";
        options.password = "pw";
        RedisConnection connection(io, options);
        const auto script = connection.add_script(code);
        start_and_wait_ready(io, connection);
        CHECK_FALSE(connection.uses_function(script));
        const auto call = call_once(io, connection, script, "counter", "3");
        REQUIRE(call.ok());
        CHECK(call.reply.integer == 3);
        CHECK(check.must({"FUNCTION", "LIST", "LIBRARYNAME", "conn_test"}).elements.empty());
    }

    SECTION("a library Redis will not compile is an EVALSHA fallback, not a dead connection") {
        code.library = "#!lua name=conn_test\nthis is not lua";
        RedisConnection connection(io, options);
        const auto script = connection.add_script(code);
        start_and_wait_ready(io, connection);
        CHECK_FALSE(connection.uses_function(script));
    }
}

TEST_CASE("redis connection: a script call is never resent after the connection drops", "[redis]") {
    RedisServer server;
    boost::asio::io_context io;
    RedisConnection connection(io, options_for(server));
    const auto script = connection.add_script("return redis.call('INCR', KEYS[1])");
    start_and_wait_ready(io, connection);

    server.suspend();  // the call reaches the socket; nobody answers
    Calls call;
    connection.evalsha(script, {"charged"}, {}, call.callback());
    run_for(io, 50ms);
    CHECK(call.results.empty());
    server.kill();
    REQUIRE(run_until(io, [&] { return call.done(); }));
    CHECK(call.results[0].error->code == RedisError::Code::connection_lost);

    server.restart();
    REQUIRE(run_until(io, [&] { return connection.ready(); }, 3s));
    run_for(io, 100ms);
    CHECK(call.results.size() == 1);
    SyncRedis check(server.port());
    CHECK(check.integer({"EXISTS", "charged"}) == 0);
}

TEST_CASE("redis connection: stop() answers pending callbacks exactly once", "[redis]") {
    RedisServer server;
    boost::asio::io_context io;
    std::optional<RedisConnection> connection;
    connection.emplace(io, options_for(server));
    start_and_wait_ready(io, *connection);
    server.suspend();
    Calls call;
    connection->command({"PING"}, call.callback());
    run_for(io, 20ms);
    REQUIRE(call.results.empty());

    SECTION("stop") { connection->stop(); }
    SECTION("destroy") { connection.reset(); }
    REQUIRE(call.results.size() == 1);
    CHECK(call.results[0].error->code == RedisError::Code::shutting_down);
    run_for(io, 50ms);
    CHECK(call.results.size() == 1);
    server.resume();
}

TEST_CASE("redis connection: flush_output and poll_replies work without the event loop", "[redis]") {
    RedisServer server;
    SyncRedis check(server.port());
    boost::asio::io_context io;
    RedisConnection connection(io, options_for(server));
    start_and_wait_ready(io, connection);

    Calls set;
    connection.command({"SET", "written", "now"}, set.callback());
    connection.flush_output();  // on the socket without a turn of the loop
    std::string seen;
    for (int i = 0; i < 200 && seen != "now"; ++i) {
        const auto reply = check.must({"GET", "written"});
        seen = reply.type == redis::RedisReply::Type::string ? reply.text : "";
        if (seen != "now") std::this_thread::sleep_for(5ms);
    }
    CHECK(seen == "now");
    CHECK_FALSE(set.done());  // the reply waits on the socket ...
    std::this_thread::sleep_for(50ms);
    connection.poll_replies();
    REQUIRE(set.done());  // ... and is taken in by the poll, still without the loop
    CHECK(set.results[0].ok());
    CHECK(set.results[0].reply.text == "OK");

    // Nothing waiting: a poll reads nothing and answers nothing.
    Calls later;
    connection.poll_replies();
    connection.command({"PING"}, later.callback());
    connection.poll_replies();
    CHECK(run_until(io, [&] { return later.done(); }));
    CHECK(later.results.size() == 1);
}

TEST_CASE("redis connection: a script call written now is on the socket before evalsha returns", "[redis]") {
    RedisServer server;
    SyncRedis check(server.port());
    boost::asio::io_context io;
    RedisConnection connection(io, options_for(server));
    const auto script = connection.add_script("return redis.call('SET', KEYS[1], ARGV[1])");
    start_and_wait_ready(io, connection);

    Calls set;
    connection.evalsha(script, {"written"}, {"now"}, set.callback(), true);
    std::string seen;
    for (int i = 0; i < 200 && seen != "now"; ++i) {
        const auto reply = check.must({"GET", "written"});
        seen = reply.type == redis::RedisReply::Type::string ? reply.text : "";
        if (seen != "now") std::this_thread::sleep_for(5ms);
    }
    CHECK(seen == "now");  // written without a turn of the loop
    CHECK_FALSE(set.done());
    REQUIRE(run_until(io, [&] { return set.done(); }));
    REQUIRE(set.results.size() == 1);
    CHECK(set.results[0].ok());

    SECTION("what the socket does not take at once goes as it drains") {
        // 32 MiB: far more than a socket buffers; the call after it is written with it.
        const std::string huge(32u << 20, 'z');
        Calls big;
        connection.evalsha(script, {"huge"}, {huge}, big.callback(), true);
        Calls after;
        connection.evalsha(script, {"after"}, {"1"}, after.callback(), true);
        REQUIRE(run_until(io, [&] { return after.done(); }));
        REQUIRE(big.results.size() == 1);
        CHECK(big.results[0].ok());
        CHECK(check.must({"STRLEN", "huge"}).integer == static_cast<long long>(huge.size()));
        CHECK(check.text({"GET", "after"}) == "1");
    }
}

TEST_CASE("redis connection: require_master refuses a replica and leaves one that is demoted", "[redis][sentinel]") {
    RedisServer server;
    boost::asio::io_context io;
    auto options = options_for(server);
    options.require_master = true;
    std::vector<std::pair<RedisConnection::Trouble, std::string>> troubles;

    SECTION("a replica never becomes ready, and says why") {
        SyncRedis admin(server.port());
        admin.must({"REPLICAOF", "127.0.0.1", "1"});  // a replica (of nothing that answers)
        RedisConnection connection(io, options);
        connection.on_trouble([&](RedisConnection::Trouble t, const std::string& d) { troubles.emplace_back(t, d); });
        connection.start();
        REQUIRE(run_until(io, [&] {
            for (const auto& t : troubles)
                if (t.first == RedisConnection::Trouble::not_master) return true;
            return false;
        }));
        CHECK_FALSE(connection.ready());
        // Once it is a master again, the connection takes it (it kept trying).
        admin.must({"REPLICAOF", "NO", "ONE"});
        REQUIRE(run_until(io, [&] { return connection.ready(); }));
    }

    SECTION("READONLY closes the connection: nothing more goes to a demoted master") {
        RedisConnection connection(io, options);
        connection.on_trouble([&](RedisConnection::Trouble t, const std::string& d) { troubles.emplace_back(t, d); });
        start_and_wait_ready(io, connection);
        SyncRedis admin(server.port());
        admin.must({"REPLICAOF", "127.0.0.1", "1"});
        Calls write;
        connection.command({"SET", "k", "v"}, write.callback());
        REQUIRE(run_until(io, [&] { return write.done(); }));
        REQUIRE_FALSE(write.results[0].ok());
        CHECK(write.results[0].error->message.rfind("READONLY", 0) == 0);
        REQUIRE(run_until(io, [&] { return !troubles.empty() && !connection.ready(); }));
        CHECK(troubles.front().first == RedisConnection::Trouble::not_master);
        Calls after;
        connection.command({"GET", "k"}, after.callback());
        REQUIRE(run_until(io, [&] { return after.done(); }));
        REQUIRE_FALSE(after.results[0].ok());
        CHECK(after.results[0].error->code == RedisError::Code::not_connected);
        admin.must({"REPLICAOF", "NO", "ONE"});
    }
}

TEST_CASE("redis connection: retarget moves to another server at once", "[redis][sentinel]") {
    RedisServer a;
    RedisServer b;
    boost::asio::io_context io;
    RedisConnection connection(io, options_for(a));
    start_and_wait_ready(io, connection);
    CHECK(connection.address() == "127.0.0.1:" + std::to_string(a.port()));
    Calls pending;
    connection.command({"PING"}, pending.callback());  // queued, not answered before the move
    connection.retarget("127.0.0.1", b.port());
    REQUIRE(run_until(io, [&] { return pending.done(); }));
    REQUIRE_FALSE(pending.results[0].ok());
    CHECK(pending.results[0].error->code == RedisError::Code::connection_lost);  // never resent
    REQUIRE(run_until(io, [&] { return connection.ready(); }));
    CHECK(connection.address() == "127.0.0.1:" + std::to_string(b.port()));
    Calls set;
    connection.command({"SET", "where", "b"}, set.callback());
    REQUIRE(run_until(io, [&] { return set.done(); }));
    CHECK(SyncRedis(b.port()).text({"GET", "where"}) == "b");
}
