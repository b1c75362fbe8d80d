// The `gemma4` command line: a tiny argument reader and a registry of subcommands. Each
// subcommand lives in commands/<name>.cpp and registers itself with a `Command` object.
#pragma once

#include <gemma4/error.hpp>

#include <charconv>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gemma4::cli {

/// `--name value` and `--flag` options after the subcommand. Unknown or unused options are
/// errors, so typos never pass silently.
class Args {
public:
    Args(std::string command, std::vector<std::string> argv) : command_(std::move(command)) {
        for (std::size_t i = 0; i < argv.size(); ++i) {
            const std::string& a = argv[i];
            if (a.rfind("--", 0) != 0 || a.size() < 3)
                throw InvalidArgument(command_ + ": unexpected argument '" + a + "'");
            const auto eq = a.find('=');
            if (eq != std::string::npos) {
                values_[a.substr(2, eq - 2)].push_back(a.substr(eq + 1));
            } else if (i + 1 < argv.size() && !(argv[i + 1].rfind("--", 0) == 0 && argv[i + 1].size() > 2)) {
                values_[a.substr(2)].push_back(argv[++i]);
            } else {
                values_[a.substr(2)].push_back({});
                flags_.insert({a.substr(2), true});
            }
        }
    }

    const std::string& command() const { return command_; }

    bool flag(const std::string& name) {
        used_.insert({name, true});
        auto it = values_.find(name);
        if (it == values_.end()) return false;
        if (!flags_.count(name))
            throw InvalidArgument(command_ + ": --" + name + " takes no value");
        return true;
    }

    std::optional<std::string> get(const std::string& name) {
        used_.insert({name, true});
        auto it = values_.find(name);
        if (it == values_.end()) return std::nullopt;
        if (flags_.count(name)) throw InvalidArgument(command_ + ": --" + name + " needs a value");
        if (it->second.size() > 1) throw InvalidArgument(command_ + ": --" + name + " given more than once");
        return it->second.front();
    }

    std::vector<std::string> get_all(const std::string& name) {
        used_.insert({name, true});
        auto it = values_.find(name);
        if (it == values_.end()) return {};
        if (flags_.count(name)) throw InvalidArgument(command_ + ": --" + name + " needs a value");
        return it->second;
    }

    std::string require(const std::string& name) {
        auto v = get(name);
        if (!v) throw InvalidArgument(command_ + ": missing --" + name);
        return *v;
    }

    template <class T>
    T number(const std::string& name, T fallback) {
        auto v = get(name);
        return v ? parse_number<T>(name, *v) : fallback;
    }

    template <class T>
    T parse_number(const std::string& name, const std::string& text) const {
        T value{};
        const char* end = text.data() + text.size();
        auto [p, ec] = std::from_chars(text.data(), end, value);
        if (ec != std::errc() || p != end || text.empty())
            throw InvalidArgument(command_ + ": --" + name + " expects a number, got '" + text + "'");
        return value;
    }

    /// Call after reading every option: anything left over is a typo or an unsupported option.
    void finish() const {
        for (const auto& [name, v] : values_)
            if (!used_.count(name)) throw InvalidArgument(command_ + ": unknown option --" + name);
    }

private:
    std::string command_;
    std::map<std::string, std::vector<std::string>> values_;
    std::map<std::string, bool> flags_;
    std::map<std::string, bool> used_;
};

using CommandFn = std::function<int(Args&)>;

struct CommandInfo {
    std::string summary;
    CommandFn run;
};

inline std::map<std::string, CommandInfo>& registry() {
    static std::map<std::string, CommandInfo> commands;
    return commands;
}

/// `static const Command reg{"name", "one-line summary", run};` in a commands/*.cpp file.
struct Command {
    Command(std::string name, std::string summary, CommandFn run) {
        registry()[std::move(name)] = CommandInfo{std::move(summary), std::move(run)};
    }
};

/// Comma-separated decimal integers ("2,17,33").
inline std::vector<std::int32_t> parse_id_list(std::string_view text, std::string_view what) {
    std::vector<std::int32_t> ids;
    std::size_t pos = 0;
    while (pos <= text.size()) {
        std::size_t comma = text.find(',', pos);
        if (comma == std::string_view::npos) comma = text.size();
        std::string_view item = text.substr(pos, comma - pos);
        while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
        while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
        std::int64_t v = 0;
        auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
        if (item.empty() || ec != std::errc() || p != item.data() + item.size() || v < 0 || v > INT32_MAX)
            throw InvalidArgument(std::string(what) + ": '" + std::string(item) + "' is not a token id");
        ids.push_back(static_cast<std::int32_t>(v));
        pos = comma + 1;
    }
    if (ids.empty()) throw InvalidArgument(std::string(what) + ": empty id list");
    return ids;
}

/// `make-tiny`'s work, reused by `demo`: writes a tiny checkpoint (and tokenizer) to `out`.
int make_tiny(Args& args, const std::string& out);

}  // namespace gemma4::cli
