// Runs the built `gemma4` program and captures its exit status, stdout and stderr.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>

namespace gemma4::test {

struct CliResult {
    int status = -1;
    std::string out, err;
};

inline std::string read_text(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

/// `args` is appended to the program path as is (quote what needs quoting); `stdin_text` is fed
/// on standard input.
inline CliResult run_cli(const std::string& args, const std::string& stdin_text = "") {
    const auto dir = std::filesystem::path(GEMMA4_TEST_TMP_DIR);
    static int counter = 0;
    const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(counter++);
    const auto in = dir / ("cli_in_" + tag), out = dir / ("cli_out_" + tag), err = dir / ("cli_err_" + tag);
    std::ofstream(in, std::ios::binary) << stdin_text;
    const std::string cmd = std::string(GEMMA4_CLI_PATH) + " " + args + " <" + in.string() + " >" + out.string() + " 2>" + err.string();
    const int raw = std::system(cmd.c_str());
    CliResult r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
    r.out = read_text(out);
    r.err = read_text(err);
    std::filesystem::remove(in);
    std::filesystem::remove(out);
    std::filesystem::remove(err);
    return r;
}

/// Lines in `s` (newline characters): an error is reported on one line.
inline int line_count(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace gemma4::test
