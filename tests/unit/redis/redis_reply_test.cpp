// Replies built by hiredis's reader straight into RedisReply trees (build_owned_replies):
// the reader is fed RESP bytes, as from a socket, and what it hands out is read the way
// the connection reads it (take_reply), then freed by the reader's own function.
#include <catch2/catch.hpp>

#include <string>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "redis/redis_reply.hpp"

using namespace sluice;
using redis::RedisReply;

namespace {

struct Reader {
    ::redisReader* reader = redisReaderCreate();
    explicit Reader(const ::redisAsyncContext* context = nullptr) { redis::build_owned_replies(*reader, context); }
    ~Reader() { redisReaderFree(reader); }

    void feed(const std::string& bytes) { REQUIRE(redisReaderFeed(reader, bytes.data(), bytes.size()) == REDIS_OK); }

    // The next whole reply, taken and freed; nullopt when the bytes so far hold none.
    std::optional<redis::RedisResult> next() {
        void* reply = nullptr;
        REQUIRE(redisReaderGetReply(reader, &reply) == REDIS_OK);
        if (reply == nullptr) return std::nullopt;
        auto result = redis::take_reply(reply);
        reader->fn->freeObject(reply);
        return result;
    }
};

}  // namespace

TEST_CASE("owned replies: every RESP2 type, nested, in one tree", "[redis]") {
    Reader r;
    r.feed(":-42\r\n$5\r\nhello\r\n+OK\r\n$-1\r\n*0\r\n*-1\r\n");
    auto integer = r.next();
    REQUIRE(integer);
    REQUIRE(integer->ok());
    CHECK(integer->reply.type == RedisReply::Type::integer);
    CHECK(integer->reply.integer == -42);
    auto string = r.next();
    CHECK(string->reply.type == RedisReply::Type::string);
    CHECK(string->reply.text == "hello");
    auto status = r.next();
    CHECK(status->reply.type == RedisReply::Type::status);
    CHECK(status->reply.text == "OK");
    CHECK(r.next()->reply.type == RedisReply::Type::nil);
    auto empty = r.next();
    CHECK(empty->reply.type == RedisReply::Type::array);
    CHECK(empty->reply.elements.empty());
    CHECK(r.next()->reply.type == RedisReply::Type::nil);
    CHECK_FALSE(r.next());

    // A script's reply: integers, with arrays, strings, nils and an error inside.
    r.feed("*5\r\n:1795000000000000\r\n*3\r\n:1\r\n$0\r\n\r\n*2\r\n$-1\r\n-ERR inner\r\n$3\r\nabc\r\n*0\r\n:7\r\n");
    auto tree = r.next();
    REQUIRE(tree);
    REQUIRE(tree->ok());
    const auto& top = tree->reply;
    REQUIRE(top.type == RedisReply::Type::array);
    REQUIRE(top.elements.size() == 5);
    CHECK(top.elements[0].integer == 1795000000000000);
    const auto& middle = top.elements[1];
    REQUIRE(middle.elements.size() == 3);
    CHECK(middle.elements[0].integer == 1);
    CHECK(middle.elements[1].type == RedisReply::Type::string);
    CHECK(middle.elements[1].text.empty());
    REQUIRE(middle.elements[2].elements.size() == 2);
    CHECK(middle.elements[2].elements[0].type == RedisReply::Type::nil);
    CHECK(middle.elements[2].elements[1].type == RedisReply::Type::status);  // as copy_reply keeps it
    CHECK(middle.elements[2].elements[1].text == "ERR inner");
    CHECK(top.elements[2].text == "abc");
    CHECK(top.elements[3].type == RedisReply::Type::array);
    CHECK(top.elements[4].integer == 7);
}

TEST_CASE("owned replies: an error reply is an error, also to hiredis", "[redis]") {
    Reader r;
    r.feed("-NOSCRIPT No matching script\r\n");
    void* reply = nullptr;
    REQUIRE(redisReaderGetReply(r.reader, &reply) == REDIS_OK);
    REQUIRE(reply != nullptr);
    // hiredis reads a reply nobody waited for as a ::redisReply: type and text must be there.
    const auto* head = static_cast<const ::redisReply*>(reply);
    CHECK(head->type == REDIS_REPLY_ERROR);
    CHECK(std::string(head->str, head->len) == "NOSCRIPT No matching script");
    auto result = redis::take_reply(reply);
    r.reader->fn->freeObject(reply);
    REQUIRE_FALSE(result.ok());
    CHECK(result.error->code == redis::RedisError::Code::reply_error);
    CHECK(result.error->message == "NOSCRIPT No matching script");
}

TEST_CASE("owned replies: a reply split across reads, and a broken one", "[redis]") {
    Reader r;
    const std::string whole = "*3\r\n:1\r\n$11\r\nhello world\r\n*1\r\n:2\r\n";
    for (std::size_t i = 0; i + 1 < whole.size(); ++i) {
        r.feed(whole.substr(i, 1));
        REQUIRE_FALSE(r.next());
    }
    r.feed(whole.substr(whole.size() - 1));
    auto reply = r.next();
    REQUIRE(reply);
    REQUIRE(reply->reply.elements.size() == 3);
    CHECK(reply->reply.elements[1].text == "hello world");
    CHECK(reply->reply.elements[2].elements[0].integer == 2);

    // A protocol error halfway through an array: the reader frees what it built, reports.
    Reader broken;
    broken.feed("*3\r\n:1\r\n$2\r\nab\r\n!oops\r\n");
    void* none = nullptr;
    CHECK(redisReaderGetReply(broken.reader, &none) == REDIS_ERR);
    CHECK(none == nullptr);
}

TEST_CASE("owned replies: an array announcing more elements than sluice ever gets fails before allocating", "[redis]") {
    Reader r;
    // 20 million elements would be over a gigabyte of RedisReply values.
    REQUIRE(redisReaderFeed(r.reader, "*20000000\r\n:1\r\n", 15) == REDIS_OK);
    void* reply = nullptr;
    CHECK(redisReaderGetReply(r.reader, &reply) == REDIS_ERR);
    CHECK(reply == nullptr);
    CHECK(r.reader->err != 0);

    Reader nested;
    REQUIRE(redisReaderFeed(nested.reader, "*1\r\n*70000\r\n", 13) == REDIS_OK);
    CHECK(redisReaderGetReply(nested.reader, &reply) == REDIS_ERR);

    Reader largest;  // the bound itself is accepted
    const std::string header = "*" + std::to_string(redis::max_reply_elements) + "\r\n";
    largest.feed(header);
    std::string elements;
    for (std::size_t i = 0; i < redis::max_reply_elements; ++i) elements += ":7\r\n";
    largest.feed(elements);
    auto result = largest.next();
    REQUIRE(result);
    REQUIRE(result->ok());
    CHECK(result->reply.elements.size() == redis::max_reply_elements);
}

namespace {

// Whether `bytes` make a reply the reader accepts (the reply is freed), or one it refuses.
bool accepted(::redisReader* reader, const std::string& bytes) {
    REQUIRE(redisReaderFeed(reader, bytes.data(), bytes.size()) == REDIS_OK);
    void* reply = nullptr;
    if (redisReaderGetReply(reader, &reply) != REDIS_OK) return false;
    REQUIRE(reply != nullptr);
    reader->fn->freeObject(reply);
    return true;
}

}  // namespace

TEST_CASE("replies no command waits for fail the connection (hiredis would abort)", "[redis]") {
    ::redisAsyncContext context{};  // what the reader looks at: flags, the callbacks waiting
    ::redisCallback waiting{};
    for (const bool owned : {true, false}) {
        INFO((owned ? "owned" : "hiredis") << " replies");
        for (const std::string bytes : {"+OK\r\n", ":1\r\n", "$3\r\nabc\r\n", "$-1\r\n", "*1\r\n:1\r\n"}) {
            INFO(bytes);
            ::redisReader* reader = redisReaderCreate();
            if (owned) redis::build_owned_replies(*reader, &context);
            else redis::build_bounded_hiredis_replies(*reader, &context);
            context.replies.head = nullptr;
            CHECK_FALSE(accepted(reader, bytes));
            redisReaderFree(reader);
            reader = redisReaderCreate();
            if (owned) redis::build_owned_replies(*reader, &context);
            else redis::build_bounded_hiredis_replies(*reader, &context);
            context.replies.head = &waiting;  // a command waits: the same bytes are its reply
            CHECK(accepted(reader, bytes));
            context.replies.head = nullptr;  // an error no command waits for is hiredis's to report
            CHECK(accepted(reader, "-ERR max number of clients reached\r\n"));
            redisReaderFree(reader);
        }
    }
}

TEST_CASE("a subscribed connection's messages hiredis cannot read fail the connection", "[redis]") {
    ::redisAsyncContext context{};
    context.c.flags = REDIS_SUBSCRIBED;
    ::redisReader* reader = redisReaderCreate();
    redis::build_bounded_hiredis_replies(*reader, &context);
    const auto fresh = [&] {
        redisReaderFree(reader);
        reader = redisReaderCreate();
        redis::build_bounded_hiredis_replies(*reader, &context);
    };
    for (const std::string bytes : {"*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$5\r\na b c\r\n",
                                    "*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$1\r\nc\r\n$1\r\nx\r\n",
                                    "*3\r\n$11\r\nunsubscribe\r\n$1\r\nc\r\n:0\r\n",
                                    "*2\r\n$4\r\npong\r\n$0\r\n\r\n", "+OK\r\n"}) {
        INFO(bytes);
        CHECK(accepted(reader, bytes));
    }
    for (const std::string bytes : {"*0\r\n", "*1\r\n$7\r\nmessage\r\n", "*3\r\n:1\r\n:2\r\n:3\r\n",
                                    "*3\r\n$7\r\nmessage\r\n:2\r\n$1\r\nx\r\n",
                                    "*3\r\n+message\r\n$1\r\nc\r\n$1\r\nx\r\n",
                                    "*2\r\n$11\r\nunsubscribe\r\n$14\r\n+switch-master\r\n",
                                    "*3\r\n$12\r\nPUNSUBSCRIBE\r\n$1\r\nc\r\n$1\r\n0\r\n"}) {
        INFO(bytes);
        fresh();
        CHECK_FALSE(accepted(reader, bytes));
    }
    // A regular command's reply while subscribed is that command's, whatever its shape.
    ::redisCallback waiting{};
    context.replies.head = &waiting;
    fresh();
    CHECK(accepted(reader, "*1\r\n:1\r\n"));
    redisReaderFree(reader);
}

TEST_CASE("the arrays of one reply are bounded together", "[redis]") {
    const auto children = [](std::size_t arrays, std::size_t each) {
        std::string out = "*" + std::to_string(arrays) + "\r\n";
        for (std::size_t a = 0; a < arrays; ++a) {
            out += "*" + std::to_string(each) + "\r\n";
            for (std::size_t i = 0; i < each; ++i) out += "*0\r\n";
        }
        return out;
    };
    const std::size_t each = redis::max_reply_elements;
    const std::size_t fit = (redis::max_reply_elements_in_all - 8) / each;  // with the root's own
    for (const bool owned : {true, false}) {
        INFO((owned ? "owned" : "hiredis") << " replies");
        for (const auto& [arrays, ok] : {std::pair{fit, true}, std::pair{fit + 1, false}}) {
            ::redisReader* reader = redisReaderCreate();
            if (owned) redis::build_owned_replies(*reader);
            else redis::build_bounded_hiredis_replies(*reader);
            CHECK(accepted(reader, children(arrays, each)) == ok);
            redisReaderFree(reader);
        }
    }
}
