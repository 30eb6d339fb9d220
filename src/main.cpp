// sluice: command line, configuration check, start.
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

#include "config/loader.hpp"
#include "observe/logging.hpp"
#include "server/server.hpp"

namespace {

constexpr std::string_view usage =
    "Usage: sluice [-c FILE] [--check]\n"
    "\n"
    "An HTTP/1.1 reverse proxy with Redis-backed rate limiting.\n"
    "\n"
    "Options:\n"
    "  -c, --config FILE  configuration file (default conf/sluice.yaml)\n"
    "      --check        validate the configuration, print 'configuration OK' or every\n"
    "                     problem as FILE:LINE:COL: message, and exit\n"
    "      --version      print the version and exit\n"
    "  -h, --help         print this help and exit\n"
    "\n"
    "Signals: SIGHUP reloads the configuration; SIGTERM/SIGINT stop gracefully.\n"
    "Exit codes: 0 normal, 1 configuration error, 2 start-up error.\n";

}  // namespace

int main(int argc, char** argv) {
    std::string config_path = "conf/sluice.yaml";
    bool check_only = false;
    for (int i = 1; i < argc; ++i) {
        std::string_view arg = argv[i];
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
        } else if (arg == "-c" || arg == "--config") {
            if (i + 1 >= argc) {
                std::cerr << "sluice: " << arg << " needs a file name\n" << usage;
                return 2;
            }
            config_path = argv[++i];
        } else if (arg.starts_with("--config=")) {
            config_path = std::string(arg.substr(9));
        } else {
            std::cerr << "sluice: unknown argument '" << arg << "'\n" << usage;
            return 2;
        }
    }

    auto loaded = sluice::config::load_file(config_path);
    for (const auto& d : loaded.diagnostics) std::cerr << d.str() << "\n";
    if (loaded.io_error) return 2;
    if (!loaded.ok()) return 1;
    if (check_only) {
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
