// gemma4: the command-line program. Subcommands register themselves (see cli.hpp).
#include "cli.hpp"

#include <gemma4/kernels/cpu.hpp>
#include <gemma4/version.hpp>

#include <cstdio>
#include <exception>
#include <iostream>

int main(int argc, char** argv) {
    using namespace gemma4::cli;
    auto usage = [] {
        std::fprintf(stderr, "usage: gemma4 <command> [options]\n\ncommands:\n");
        for (const auto& [name, info] : registry())
            std::fprintf(stderr, "  %-17s %s\n", name.c_str(), info.summary.c_str());
        std::fprintf(stderr, "\n'gemma4 <command> --help' lists the command's options.\n");
    };
    if (argc < 2 || std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h") {
        usage();
        return argc < 2 ? 2 : 0;
    }
    if (std::string_view(argv[1]) == "--version") {
        try {
            std::printf("gemma4 %s (level %s)\n", gemma4::kVersion, std::string(gemma4::isa_name(gemma4::active_isa())).c_str());
        } catch (const gemma4::Error& e) {
            std::fprintf(stderr, "gemma4: error: %s\n", e.what());
            return 1;
        }
        return 0;
    }
    const std::string name = argv[1];
    auto it = registry().find(name);
    if (it == registry().end()) {
        std::fprintf(stderr, "gemma4: unknown command '%s'\n", name.c_str());
        usage();
        return 2;
    }
    try {
        Args args(name, it->second.options, std::vector<std::string>(argv + 2, argv + argc));
        if (args.help()) {
            std::fputs(help_text(name, it->second).c_str(), stdout);
            return 0;
        }
        return it->second.run(args);
    } catch (const gemma4::Error& e) {
        std::fprintf(stderr, "gemma4 %s: error: %s\n", name.c_str(), e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "gemma4 %s: error: out of memory\n", name.c_str());
        return 3;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gemma4 %s: internal error: %s\n", name.c_str(), e.what());
        return 4;
    }
}
