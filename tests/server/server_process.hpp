// End-to-end helpers: a `gemma4 serve` child process on a free loopback port (it binds port 0 and
// prints the port it got), a tiny checkpoint to serve, and a raw HTTP/1.1 client over a socket
// (so the tests see the exact bytes: status line, chunked framing, SSE events).
#pragma once

#include <catch2/catch.hpp>

#include "multimodal/test_files.hpp"
#include "server/data_url.hpp"
#include "support/run_cli.hpp"
#include "support/temp_dir.hpp"

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace gemma4::test {

/// A tiny checkpoint with a tokenizer, made once per process.
inline const std::filesystem::path& tiny_model() {
    static const std::filesystem::path dir = [] {
        const auto d = temp_dir("server_model") / "tiny";
        const auto r = run_cli("make-tiny --out " + d.string());
        REQUIRE(r.status == 0);
        return d;
    }();
    return dir;
}

/// A larger tiny checkpoint (about a thousand tokens/s on one thread): a long reply is still
/// running a second later.
inline const std::filesystem::path& slower_model() {
    static const std::filesystem::path dir = [] {
        const auto d = temp_dir("server_slower_model") / "slower";
        const auto r = run_cli("make-tiny --out " + d.string() + " --hidden-size 256 --intermediate-size 512 --layers 4 --max-positions 4096");
        REQUIRE(r.status == 0);
        return d;
    }();
    return dir;
}

class ServerProcess {
public:
    explicit ServerProcess(const std::vector<std::string>& args, const std::string& name = "server",
                           const std::filesystem::path& model = tiny_model()) {
        log_ = temp_dir("serve_" + name) / "stderr.txt";
        std::vector<std::string> argv = {GEMMA4_CLI_PATH, "serve", "--model", model.string(), "--port", "0", "--threads", "1"};
        argv.insert(argv.end(), args.begin(), args.end());
        std::vector<char*> cargv;
        for (auto& a : argv) cargv.push_back(a.data());
        cargv.push_back(nullptr);
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, 2, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
        const int rc = posix_spawn(&pid_, GEMMA4_CLI_PATH, &actions, nullptr, cargv.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        REQUIRE(rc == 0);
        const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
        while (std::chrono::steady_clock::now() < deadline) {
            std::smatch m;
            const std::string text = log();
            if (std::regex_search(text, m, listening)) {
                port_ = std::stoi(m[1]);
                return;
            }
            int status = 0;
            if (waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                FAIL("gemma4 serve exited at start-up: " << text);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        FAIL("gemma4 serve did not start: " << log());
    }
    ServerProcess(const ServerProcess&) = delete;
    ~ServerProcess() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
    }

    int port() const { return port_; }
    std::string log() const { return read_text(log_); }

    /// Sends `signal` and waits up to `timeout` for the exit status (nothing if still running).
    std::optional<int> stop(int signal, std::chrono::milliseconds timeout) {
        ::kill(pid_, signal);
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (std::chrono::steady_clock::now() < deadline) {
            int status = 0;
            if (waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return std::nullopt;
    }

private:
    pid_t pid_ = -1;
    int port_ = 0;
    std::filesystem::path log_;
};

/// A connected socket to 127.0.0.1:port, closed on destruction.
class Connection {
public:
    explicit Connection(int port, int timeout_seconds = 120) {
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        REQUIRE(fd_ >= 0);
        timeval tv{timeout_seconds, 0};
        setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<std::uint16_t>(port));
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    }
    Connection(const Connection&) = delete;
    ~Connection() { close(); }
    void close() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

    /// Sends all of `data`; false if the peer closed (a server refusing a body early may do that).
    bool send(std::string_view data) {
        while (!data.empty()) {
            const auto n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
            if (n <= 0) return false;
            data.remove_prefix(static_cast<std::size_t>(n));
        }
        return true;
    }
    /// Some bytes, or "" at end of stream / error.
    std::string receive() {
        char buffer[16384];
        const auto n = ::recv(fd_, buffer, sizeof buffer, 0);
        return n > 0 ? std::string(buffer, static_cast<std::size_t>(n)) : std::string();
    }
    std::string receive_all() {
        std::string out;
        for (std::string part = receive(); !part.empty(); part = receive()) out += part;
        return out;
    }

private:
    int fd_ = -1;
};

struct HttpResponse {
    int status = 0;
    std::string headers;  ///< raw header block
    std::string body;     ///< de-chunked
    std::string raw_body; ///< as sent
    bool chunked = false;
    nlohmann::json json() const { return nlohmann::json::parse(body); }
    std::string header(const std::string& name) const {
        std::regex re("\r\n" + name + ": ([^\r]*)", std::regex::icase);
        std::smatch m;
        return std::regex_search(headers, m, re) ? std::string(m[1]) : std::string();
    }
};

inline std::string request_text(const std::string& method, const std::string& path, const std::string& body, const std::string& key,
                                const std::string& extra_headers = "") {
    std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
    if (!key.empty()) r += "Authorization: Bearer " + key + "\r\n";
    if (method == "POST") r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    return r + extra_headers + "\r\n" + body;
}

/// Splits a raw response; decodes chunked transfer encoding (and checks its framing).
inline HttpResponse parse_response(const std::string& raw) {
    HttpResponse r;
    const auto end = raw.find("\r\n\r\n");
    REQUIRE(end != std::string::npos);
    r.headers = raw.substr(0, end + 2);
    REQUIRE(raw.rfind("HTTP/1.1 ", 0) == 0);
    r.status = std::stoi(raw.substr(9, 3));
    r.raw_body = raw.substr(end + 4);
    r.chunked = r.header("Transfer-Encoding") == "chunked";
    if (!r.chunked) {
        r.body = r.raw_body;
        return r;
    }
    std::size_t pos = 0;
    while (true) {
        const auto line_end = r.raw_body.find("\r\n", pos);
        REQUIRE(line_end != std::string::npos);
        const std::size_t size = std::stoul(r.raw_body.substr(pos, line_end - pos), nullptr, 16);
        pos = line_end + 2;
        if (size == 0) break;
        REQUIRE(pos + size + 2 <= r.raw_body.size());
        r.body += r.raw_body.substr(pos, size);
        REQUIRE(r.raw_body.substr(pos + size, 2) == "\r\n");
        pos += size + 2;
    }
    return r;
}

inline HttpResponse http(int port, const std::string& method, const std::string& path, const std::string& body = "", const std::string& key = "",
                         const std::string& extra_headers = "") {
    Connection c(port);
    c.send(request_text(method, path, body, key, extra_headers));
    return parse_response(c.receive_all());
}

/// The `data:` payloads of an SSE body, in order; checks that every event is exactly one
/// `data: ...` line followed by a blank line.
/// A 400 in OpenAI's shape whose param is `param` and whose message starts with it and holds
/// `mentions`.
inline void require_bad_param(const HttpResponse& r, const std::string& param, const std::string& mentions = "") {
    INFO(r.body);
    REQUIRE(r.status == 400);
    const nlohmann::json e = r.json()["error"];
    CHECK(e["type"] == "invalid_request_error");
    CHECK(e["param"] == param);
    CHECK(e["message"].get<std::string>().rfind(param + ": ", 0) == 0);
    CHECK(e["message"].get<std::string>().find(mentions) != std::string::npos);
}

inline std::vector<std::string> sse_data(const std::string& body) {
    std::vector<std::string> events;
    std::size_t pos = 0;
    while (pos < body.size()) {
        const auto end = body.find("\n\n", pos);
        REQUIRE(end != std::string::npos);
        const std::string event = body.substr(pos, end - pos);
        REQUIRE(event.rfind("data: ", 0) == 0);
        REQUIRE(event.find('\n') == std::string::npos);
        events.push_back(event.substr(6));
        pos = end + 2;
    }
    return events;
}

/// A small PNG as a data: URL, for image messages.
inline std::string png_data_url() {
    std::vector<unsigned> rgb;
    for (unsigned y = 0; y < 24; ++y)
        for (unsigned x = 0; x < 32; ++x) rgb.insert(rgb.end(), {x * 8, y * 10, (x * y) % 256});
    const auto path = tmp_path("server_image.png");
    write_png(path, PngSpec{.width = 32, .height = 24}, rgb);
    const auto bytes = read_bytes(path);
    return "data:image/png;base64," + gemma4::server::encode_base64(std::string(bytes.begin(), bytes.end()));
}

/// Installs the npm package `spec` ("openai@4") into `dir` (a scratch folder of the build tree)
/// unless `name` is there already, and copies the test script `script` (of tests/server) beside
/// it. Nothing when it is ready; else why not (no npm, no registry), for the test to skip.
inline std::optional<std::string> npm_client_folder(const std::filesystem::path& dir, const std::string& spec, const std::string& name,
                                                    const std::string& script) {
    if (std::system("command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1") != 0) return "node or npm not installed";
    std::filesystem::create_directories(dir);
    if (!std::filesystem::exists(dir / "node_modules" / name / "package.json")) {
        const auto log = dir / "npm-install.log";
        const std::string install = "cd '" + dir.string() + "' && timeout 300 npm install --no-audit --no-fund --loglevel=error " + spec + " >'" +
                                    log.string() + "' 2>&1";
        if (std::system(install.c_str()) != 0) return "npm install " + spec + " failed (no registry?): " + read_text(log);
    }
    std::filesystem::copy_file(std::filesystem::path(GEMMA4_SERVER_TEST_DIR) / script, dir / script, std::filesystem::copy_options::overwrite_existing);
    return std::nullopt;
}

/// One number of /metrics ("gemma4_active_sequences").
inline double metric(const std::string& metrics, const std::string& name) {
    const std::string text = "\n" + metrics;
    const auto at = text.find("\n" + name + " ");
    INFO(name << " in\n" << metrics);
    REQUIRE(at != std::string::npos);
    return std::stod(text.substr(at + name.size() + 2));
}

/// Reads /metrics (with `key`) every `poll` until `done(metrics)` holds or `timeout` passes, and
/// returns the last metrics read, for the caller's checks.
template <class Done>
std::string poll_metrics(int port, const std::string& key, Done done, std::chrono::milliseconds poll, std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string m = http(port, "GET", "/metrics", "", key).body;
    while (!done(m) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(poll);
        m = http(port, "GET", "/metrics", "", key).body;
    }
    return m;
}

}  // namespace gemma4::test
