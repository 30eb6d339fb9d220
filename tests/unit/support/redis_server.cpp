#include "redis_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <hiredis/hiredis.h>

namespace sluice::test {
namespace {

std::uint16_t free_loopback_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw std::runtime_error("socket() failed");
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t length = sizeof address;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
        ::close(fd);
        throw std::runtime_error("cannot find a free port");
    }
    ::close(fd);
    return ntohs(address.sin_port);
}

}  // namespace

RedisServer::RedisServer(std::vector<std::string> extra_args, bool unix_socket)
    : extra_args_(std::move(extra_args)), port_(free_loopback_port()) {
    char dir_template[] = "/tmp/sluice-redis-XXXXXX";
    if (::mkdtemp(dir_template) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = dir_template;
    if (unix_socket) {
        unix_path_ = dir_ + "/redis.sock";
        extra_args_.insert(extra_args_.end(), {"--unixsocket", unix_path_, "--unixsocketperm", "700"});
    }
    start();
}

RedisServer::~RedisServer() {
    if (pid_ > 0) {
        ::kill(pid_, SIGCONT);
        ::kill(pid_, SIGTERM);
        ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
}

void RedisServer::start() {
    std::vector<std::string> args{"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--dir", dir_};
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
        const int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, 1);
        ::dup2(null, 2);
        std::vector<char*> argv;
        for (auto& arg : args) argv.push_back(arg.data());
        argv.push_back(nullptr);
        ::execvp("redis-server", argv.data());
        ::_exit(127);
    }
    wait_until_answering();
}

void RedisServer::wait_until_answering() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) == pid_) {
            pid_ = -1;
            throw std::runtime_error("redis-server exited at start-up (is it installed?)");
        }
        if (redisContext* c = redisConnect("127.0.0.1", port_)) {
            const bool up = c->err == 0;
            redisFree(c);
            if (up) return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error("redis-server did not start");
}

void RedisServer::kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
}

void RedisServer::restart() {
    kill();
    start();
}

void RedisServer::suspend() { ::kill(pid_, SIGSTOP); }
void RedisServer::resume() { ::kill(pid_, SIGCONT); }

SyncRedis::SyncRedis(std::uint16_t port) : context_(redisConnect("127.0.0.1", port)) {
    if (context_ == nullptr || context_->err) throw std::runtime_error("cannot connect to the test redis");
}

SyncRedis::~SyncRedis() { redisFree(context_); }

redis::RedisResult SyncRedis::run(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    for (const auto& arg : args) {
        argv.push_back(arg.data());
        lengths.push_back(arg.size());
    }
    auto* reply = static_cast<redisReply*>(
        redisCommandArgv(context_, static_cast<int>(args.size()), argv.data(), lengths.data()));
    if (reply == nullptr) throw std::runtime_error("test redis connection failed");
    auto result = redis::copy_reply(*reply);
    freeReplyObject(reply);
    return result;
}

redis::RedisReply SyncRedis::must(const std::vector<std::string>& args) {
    auto result = run(args);
    if (!result.ok()) throw std::runtime_error(args.front() + ": " + result.error->message);
    return result.reply;
}

std::int64_t SyncRedis::integer(const std::vector<std::string>& args) {
    auto reply = must(args);
    if (reply.type != redis::RedisReply::Type::integer) throw std::runtime_error(args.front() + ": not an integer");
    return reply.integer;
}

std::string SyncRedis::text(const std::vector<std::string>& args) { return must(args).text; }

RedisCluster::RedisCluster(int masters) {
    std::vector<std::uint16_t> bus;
    for (int i = 0; i < masters; ++i) {
        bus.push_back(free_loopback_port());
        nodes_.push_back(std::make_unique<RedisServer>(std::vector<std::string>{
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
            // The bus port is port + 10000 unless told, and free ports can be above 55535.
            "--cluster-port", std::to_string(bus.back())}));
    }
    const int per = 16384 / masters;
    for (int i = 0; i < masters; ++i) {
        SyncRedis node(nodes_[i]->port());
        const int last = i == masters - 1 ? 16383 : (i + 1) * per - 1;
        node.must({"CLUSTER", "ADDSLOTSRANGE", std::to_string(i * per), std::to_string(last)});
        node.must({"CLUSTER", "SET-CONFIG-EPOCH", std::to_string(i + 1)});
        if (i > 0)
            node.must({"CLUSTER", "MEET", "127.0.0.1", std::to_string(nodes_[0]->port()), std::to_string(bus[0])});
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (const auto& n : nodes_) {
        SyncRedis node(n->port());
        while (true) {
            const auto info = node.text({"CLUSTER", "INFO"});
            const auto slots = node.must({"CLUSTER", "SLOTS"});
            if (info.find("cluster_state:ok") != std::string::npos &&
                slots.elements.size() == static_cast<std::size_t>(masters))
                break;
            if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("the test cluster did not form");
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
}

std::vector<std::uint16_t> RedisCluster::ports() const {
    std::vector<std::uint16_t> ports;
    for (const auto& n : nodes_) ports.push_back(n->port());
    return ports;
}

}  // namespace sluice::test
