// The `gemma4` command line: a tiny argument reader and a registry of subcommands. Each
// subcommand lives in commands/<name>.cpp and registers itself with a `Command` object.
#pragma once

#include <gemma4/error.hpp>
#include <gemma4/tensor/quant.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace gemma4::cli {

/// One option of a command: `--name VALUE`, or `--name` alone when `value` is empty (a flag).
/// Each command lists its options once, when it registers; the parser accepts only those and
/// `gemma4 <command> --help` prints them.
struct Option {
    std::string name;     ///< without the leading "--"
    std::string value;    ///< what the value is, shown in the help ("DIR", "N"); empty for a flag
    std::string help;     ///< one line
    unsigned traits = 0;  ///< kRequired, kRepeatable
};
inline constexpr unsigned kRequired = 1;    ///< read with Args::require (shown in the help)
inline constexpr unsigned kRepeatable = 2;  ///< may be given several times, read with Args::get_all

using Options = std::vector<Option>;

inline Options operator+(Options a, const Options& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

/// `--threads N`, taken by every command that runs a model.
inline Options threads_option() { return {{"threads", "N", "worker threads (default: one per core)"}}; }

/// `--mmproj FILE`, taken by every command that runs a model with images or audio (read with
/// Args::mmproj): a GGUF --model's image and audio embedders, from llama.cpp's mmproj file.
inline Options mmproj_option() {
    return {{"mmproj", "FILE", "llama.cpp mmproj GGUF holding the image and audio embedders of a .gguf --model"}};
}

/// `--quant-block N`, taken by every command that re-encodes weights as int8 / int4 (read with
/// quant_block).
inline Options quant_block_option() {
    return {{"quant-block", "N", "elements per int8/int4 scale when re-encoding: 32 (default) or 64 (faster batches, less accurate)"}};
}

/// The options after the subcommand, checked against the command's declared `Options`: an
/// undeclared option, a flag with a value, a missing value or a repeated option is an error, and
/// so is a declared option that the command did not read (`finish`), so typos never pass
/// silently. `--help` / `-h` anywhere among the options asks for the help instead (`help()`).
class Args {
public:
    Args(std::string command, Options options, std::vector<std::string> argv)
        : command_(std::move(command)), options_(std::move(options)) {
        std::optional<std::string> error;
        auto fail = [&](std::string message) {
            if (!error) error = command_ + ": " + std::move(message);
        };
        for (std::size_t i = 0; i < argv.size(); ++i) {
            const std::string& a = argv[i];
            if (a == "--help" || a == "-h") {
                help_ = true;
                continue;
            }
            if (!looks_like_option(a)) {
                fail("unexpected argument '" + a + "'");
                continue;
            }
            const auto eq = a.find('=');
            const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
            const Option* o = find(name);
            if (!o) {
                fail("unknown option --" + name);
                continue;
            }
            if (values_.count(name) && !(o->traits & kRepeatable)) fail("--" + name + " given more than once");
            if (o->value.empty()) {
                if (eq != std::string::npos) fail("--" + name + " takes no value");
                values_[name].push_back({});
            } else if (eq != std::string::npos) {
                values_[name].push_back(a.substr(eq + 1));
            } else if (i + 1 < argv.size() && !looks_like_option(argv[i + 1])) {
                values_[name].push_back(argv[++i]);
            } else {
                fail("--" + name + " needs a value");
            }
        }
        if (error && !help_) throw InvalidArgument(*error);
    }

    const std::string& command() const { return command_; }
    const Options& options() const { return options_; }

    /// `--help` or `-h` was given: print `help_text` instead of running the command.
    bool help() const { return help_; }

    bool flag(const std::string& name) {
        declared(name, "a flag", [](const Option& o) { return o.value.empty(); });
        return values_.count(name) > 0;
    }

    std::optional<std::string> get(const std::string& name) {
        declared(name, "an option with a value", [](const Option& o) { return !o.value.empty(); });
        auto it = values_.find(name);
        if (it == values_.end()) return std::nullopt;
        return it->second.front();
    }

    std::vector<std::string> get_all(const std::string& name) {
        declared(name, "a repeatable option", [](const Option& o) { return !o.value.empty() && (o.traits & kRepeatable); });
        auto it = values_.find(name);
        return it == values_.end() ? std::vector<std::string>{} : it->second;
    }

    std::string require(const std::string& name) {
        declared(name, "a required option", [](const Option& o) { return !o.value.empty() && (o.traits & kRequired); });
        auto it = values_.find(name);
        if (it == values_.end()) throw InvalidArgument(command_ + ": missing --" + name);
        return it->second.front();
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

    /// `--quant-block`: 32 or 64, or 0 when not given (the format's default).
    std::int64_t quant_block() {
        const auto v = get("quant-block");
        if (!v) return 0;
        const auto block = parse_number<std::int64_t>("quant-block", *v);
        if (!quant::valid_block(block)) throw InvalidArgument(command_ + ": --quant-block must be 32 or 64, got '" + *v + "'");
        return block;
    }

    /// `--mmproj`: the mmproj file's path, or empty when not given (LoadOptions::mmproj).
    std::filesystem::path mmproj() { return get("mmproj").value_or(""); }

    /// A size in bytes: a number, optionally followed by K, M or G (KiB, MiB, GiB: powers of 1024).
    std::size_t bytes(const std::string& name, std::size_t fallback) {
        const auto v = get(name);
        if (!v) return fallback;
        std::string digits = *v;
        std::size_t unit = 1;
        if (!digits.empty()) {
            const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(digits.back())));
            const std::size_t shift = last == 'K' ? 10 : last == 'M' ? 20 : last == 'G' ? 30 : 0;
            if (shift) {
                unit = std::size_t{1} << shift;
                digits.pop_back();
            }
        }
        std::size_t count = 0;
        const char* end = digits.data() + digits.size();
        auto [p, ec] = std::from_chars(digits.data(), end, count);
        if (ec != std::errc() || p != end || digits.empty())
            throw InvalidArgument(command_ + ": --" + name + " expects a size in bytes (a number, or one ending in K, M or G), got '" + *v + "'");
        if (count > std::numeric_limits<std::size_t>::max() / unit)
            throw InvalidArgument(command_ + ": --" + name + " of '" + *v + "' is too large");
        return count * unit;
    }

    /// Call after reading every option: a declared option given but never read would be ignored.
    void finish() const {
        for (const auto& [name, v] : values_)
            if (!used_.count(name)) throw InvalidArgument(command_ + ": --" + name + " is not used here");
    }

private:
    static bool looks_like_option(const std::string& a) { return a.size() > 2 && a.rfind("--", 0) == 0; }

    const Option* find(const std::string& name) const {
        for (const Option& o : options_)
            if (o.name == name) return &o;
        return nullptr;
    }

    /// Reading an option the command does not declare (or as another kind) is a bug in the
    /// program, not in the command line.
    template <class Kind>
    void declared(const std::string& name, const char* what, Kind is_kind) {
        const Option* o = find(name);
        if (!o || !is_kind(*o))
            throw std::logic_error(command_ + ": --" + name + " is read as " + what + " but not declared as one");
        used_.insert(name);
    }

    std::string command_;
    Options options_;
    bool help_ = false;
    std::map<std::string, std::vector<std::string>> values_;
    std::set<std::string> used_;
};

using CommandFn = std::function<int(Args&)>;

struct CommandInfo {
    std::string summary;
    Options options;
    CommandFn run;
};

inline std::map<std::string, CommandInfo>& registry() {
    static std::map<std::string, CommandInfo> commands;
    return commands;
}

/// `static const Command reg{"name", "one-line summary", {options...}, run};` in a
/// commands/*.cpp file.
struct Command {
    Command(std::string name, std::string summary, Options options, CommandFn run) {
        registry()[std::move(name)] = CommandInfo{std::move(summary), std::move(options), std::move(run)};
    }
};

/// What `gemma4 <name> --help` prints: the summary and every declared option.
inline std::string help_text(const std::string& name, const CommandInfo& info) {
    std::vector<std::pair<std::string, std::string>> rows;
    for (const Option& o : info.options) {
        std::string notes;
        if (o.traits & kRequired) notes += " (required)";
        if (o.traits & kRepeatable) notes += " (repeatable)";
        rows.push_back({"--" + o.name + (o.value.empty() ? "" : " " + o.value), o.help + notes});
    }
    rows.push_back({"-h, --help", "print this help"});
    std::size_t width = 0;
    for (const auto& row : rows) width = std::max(width, row.first.size());
    std::string text = "usage: gemma4 " + name + " [options]\n\n" + info.summary + "\n\noptions:\n";
    for (const auto& [left, right] : rows) text += "  " + left + std::string(width - left.size() + 2, ' ') + right + "\n";
    return text;
}

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
