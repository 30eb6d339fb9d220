// sluice: command line, configuration check, start.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

#include "config/loader.hpp"
#include "observe/logging.hpp"
#include "redis/memory_policy.hpp"
#include "server/server.hpp"
#include "server/snapshot.hpp"

namespace {

constexpr std::string_view usage =
    "Usage: sluice [-c FILE] [--check [--no-resolve] | --reload]\n"
    "\n"
    "An HTTP/1.1 reverse proxy with Redis-backed rate limiting.\n"
    "\n"
    "Options:\n"
    "  -c, --config FILE  configuration file (default conf/sluice.yaml)\n"
    "      --check        validate the configuration, print 'configuration OK' or every\n"
    "                     problem as FILE:LINE:COL: message, and exit; upstream names must\n"
    "                     resolve, as at start\n"
    "      --no-resolve   with --check: do not resolve upstream names (for names that\n"
    "                     resolve only where sluice runs)\n"
    "      --reload, -s reload\n"
    "                     check the configuration, then signal the instance whose pid\n"
    "                     server.pid_file holds to reload it (SIGHUP), and exit\n"
    "      --version      print the version and exit\n"
    "  -h, --help         print this help and exit\n"
    "\n"
    "Signals: SIGHUP reloads the configuration; SIGTERM/SIGINT stop gracefully;\n"
    "SIGUSR1 reopens the access log.\n"
    "Exit codes: 0 normal, 1 configuration error, 2 start-up error.\n";

// --check: every upstream server's name resolves now, as it must when sluice starts (nginx -t
// resolves its upstreams too). A problem per name that does not, at the server's place.
// --check: whether the Redis that would hold the keys may evict them (warnings, not errors:
// sluice starts without Redis too, and the policy is the operator's to choose).
void check_redis_memory_policy(const sluice::config::Config& config) {
    if (config.store.type != sluice::config::StoreType::redis) return;
    std::string error;
    const auto settings = sluice::redis::read_memory_settings(config.store, std::chrono::seconds(1), error);
    if (!settings) {
        std::cerr << "sluice: note: Redis's maxmemory-policy was not checked (" << error << ")\n";
        return;
    }
    for (const auto& warning : sluice::redis::memory_warnings(*settings)) std::cerr << "sluice: warning: " << warning << "\n";
}

constexpr std::string_view default_config_path = "conf/sluice.yaml";

// Whether args[i] names the configuration file (-c FILE, --config FILE, --config=FILE): then
// `path` is FILE, or empty when FILE is missing, and i is past it.
bool config_argument(const std::vector<std::string_view>& args, std::size_t& i, std::string& path) {
    const std::string_view arg = args[i];
    if (arg.starts_with("--config=")) {
        path = arg.substr(9);
        return true;
    }
    if (arg != "-c" && arg != "--config") return false;
    path = i + 1 < args.size() ? std::string(args[++i]) : std::string();
    return true;
}

// The configuration file a running sluice was started with (its -c, --config or the default,
// from its working directory); nullopt when its command line cannot be read.
std::optional<std::filesystem::path> running_config(long pid) {
    const std::string proc = "/proc/" + std::to_string(pid);
    std::ifstream cmdline(proc + "/cmdline", std::ios::binary);
    if (!cmdline) return std::nullopt;
    std::vector<std::string> words;
    for (std::string word; std::getline(cmdline, word, '\0');) words.push_back(word);
    if (words.empty()) return std::nullopt;
    const std::vector<std::string_view> args(words.begin(), words.end());
    std::string config(default_config_path);
    for (std::size_t i = 1; i < args.size(); ++i)
        if (std::string named; config_argument(args, i, named) && !named.empty()) config = named;
    std::filesystem::path file(config);
    if (file.is_relative()) {
        std::error_code ec;
        const auto cwd = std::filesystem::read_symlink(proc + "/cwd", ec);
        if (ec) return std::nullopt;
        file = cwd / file;
    }
    return file;
}

// --reload: the pid in server.pid_file, when it names a running sluice, gets SIGHUP.
int signal_reload(const sluice::config::Config& config, const std::string& config_path) {
    const std::string& path = config.server.pid_file;
    if (path.empty()) {
        std::cerr << "sluice: --reload needs server.pid_file in " << config_path
                  << " (the running instance writes its pid there)\n";
        return 2;
    }
    std::ifstream file(path);
    long pid = 0;
    if (!file || !(file >> pid) || pid < 1) {
        std::cerr << "sluice: cannot read a pid from " << path << (file ? "" : ": " + std::string(std::strerror(errno)))
                  << " (is sluice running with this configuration?)\n";
        return 2;
    }
    // A stale file can name a process that is not sluice: SIGHUP would end most programs. The
    // process's executable must have our executable's name (a binary replaced on disk since it
    // started reads "NAME (deleted)").
    auto program = [](const std::string& exe) {
        std::error_code ec;
        std::string name = std::filesystem::read_symlink(exe, ec).filename().string();
        if (ec) return std::string();
        constexpr std::string_view deleted = " (deleted)";
        if (name.ends_with(deleted)) name.resize(name.size() - deleted.size());
        return name;
    };
    const std::string theirs = program("/proc/" + std::to_string(pid) + "/exe");
    const std::string ours = program("/proc/self/exe");
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
        std::cerr << "sluice: no process " << pid << " (from " << path << "): sluice is not running, or the file is stale\n";
        return 2;
    }
    if (theirs.empty() || theirs != ours) {
        std::cerr << "sluice: process " << pid << " (from " << path << ") is "
                  << (theirs.empty() ? "a process whose program cannot be read" : theirs)
                  << ", not sluice: the pid file is stale; nothing was signalled\n";
        return 2;
    }
    // SIGHUP makes it read the file it was started with: another file is not what it would
    // read (where its command line can be read; `ps` shows it too).
    if (const auto theirs_path = running_config(pid)) {
        std::error_code ec;
        const auto mine = std::filesystem::weakly_canonical(std::filesystem::absolute(config_path), ec);
        std::error_code ec2;
        const auto running = std::filesystem::weakly_canonical(*theirs_path, ec2);
        if (!ec && !ec2 && mine != running) {
            std::cerr << "sluice: process " << pid << " (from " << path << ") runs with " << running.string()
                      << ", and a reload reads that file again, not " << config_path
                      << ": nothing was signalled (copy this file over it, or run --reload -c " << running.string()
                      << ")\n";
            return 2;
        }
    }
    if (::kill(static_cast<pid_t>(pid), SIGHUP) != 0) {
        std::cerr << "sluice: cannot signal process " << pid << ": " << std::strerror(errno) << "\n";
        return 2;
    }
    std::cout << "sluice: asked sluice (pid " << pid << ") to reload " << config_path
              << "; its log says how it went\n";
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    sluice::server::note_early_signals();
    std::string config_path(default_config_path);
    bool check_only = false;
    bool no_resolve = false;
    bool reload = false;
    const std::vector<std::string_view> args(argv, argv + argc);
    for (std::size_t i = 1; i < args.size(); ++i) {
        std::string_view arg = args[i];
        if (arg == "-h" || arg == "--help") {
            std::cout << usage;
            return 0;
        }
        if (arg == "--version") {
            std::cout << "sluice " << SLUICE_VERSION << "\n";
            return 0;
        }
        if (arg == "--check") {
            check_only = true;
        } else if (arg == "--no-resolve") {
            no_resolve = true;
        } else if (arg == "--reload") {
            reload = true;
        } else if (arg == "-s") {
            if (i + 1 >= args.size() || args[i + 1] != "reload") {
                std::cerr << "sluice: -s takes 'reload'\n" << usage;
                return 2;
            }
            ++i;
            reload = true;
        } else if (config_argument(args, i, config_path)) {
            if (config_path.empty()) {
                std::cerr << "sluice: " << arg << " needs a file name\n" << usage;
                return 2;
            }
        } else {
            std::cerr << "sluice: unknown argument '" << arg << "'\n" << usage;
            return 2;
        }
    }

    if (check_only && reload) {
        std::cerr << "sluice: --check and --reload do not go together (--reload checks first)\n" << usage;
        return 2;
    }
    if (no_resolve && !check_only) {
        std::cerr << "sluice: --no-resolve goes with --check\n" << usage;
        return 2;
    }

    auto loaded = sluice::config::load_file(config_path);
    for (const auto& d : loaded.diagnostics) std::cerr << d.str() << "\n";
    if (loaded.io_error) return 2;
    if (!loaded.ok()) {
        if (reload) std::cerr << "sluice: not reloaded: the configuration has errors\n";
        return 1;
    }
    if (check_only || reload) {
        const auto unresolved = no_resolve ? std::vector<sluice::config::Diagnostic>{}
                                           : sluice::server::unresolved_upstreams(
                                                 *loaded.config, "sluice would not start; --no-resolve skips this check");
        for (const auto& d : unresolved) std::cerr << d.str() << "\n";
        if (!unresolved.empty()) {
            if (reload) std::cerr << "sluice: not reloaded: the configuration has errors\n";
            return 1;
        }
        if (reload) return signal_reload(*loaded.config, config_path);
        if (!no_resolve) check_redis_memory_policy(*loaded.config);
        std::cout << "configuration OK\n";
        return 0;
    }

    try {
        sluice::observe::setup_logging(loaded.config->logging);
    } catch (const std::exception& e) {
        std::cerr << "sluice: cannot open the access log: " << e.what() << "\n";
        return 2;
    }
    int code = sluice::server::run_server(loaded.config);
    sluice::observe::stop_logging();
    return code;
}
