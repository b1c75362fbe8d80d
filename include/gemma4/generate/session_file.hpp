// Session files: a conversation's state on disk (Session::save / load, ChatSession::save / load),
// so that restoring it and continuing gives exactly the tokens and logits of never having
// stopped. docs/session-file.md describes the format; in short:
//
//   header (64 bytes, little-endian)
//     0  magic "GEMMA4SS"           8  u32 version (1)            12 u32 config JSON bytes
//     16 u64 model fingerprint      24 u8 scalar bytes (4 float, 8 double)
//     25 u8 KV dtype (0 Float, 1 Int8)   26 u8 kind (0 Session, 1 ChatSession)   27..31 zero
//     32 u64 payload bytes          40 u64 payload FNV-1a 64     48 u64 header FNV-1a 64
//     56 u64 zero
//   config JSON: the model's canonical config.json (config_to_json, keys sorted, compact)
//   payload: history ids, pending ids, random stream, KV record (kv/kv_state.hpp), chat state
//
// The fingerprint is FNV-1a 64 of the config JSON followed by the scalar-bytes and KV-dtype
// bytes; the header checksum covers the 64 header bytes (its own field as zero) and the config
// JSON. A file is written to `<path>.tmp` and renamed over `path`, so a crash while saving never
// leaves a half-written file under the name.
//
// Reading never trusts a size: the file's length must equal what the header describes, every
// count is checked against the bytes left and against the model before anything is allocated,
// and the state is built aside and handed over only once the whole payload has been read and its
// checksum matched. Bad files are FormatErrors; a file of another model is a ConfigError naming
// the config fields that differ; another scalar type, KV dtype or session kind is an
// InvalidArgument. Every message starts with the file's path.
#pragma once

#include <gemma4/abi.hpp>

#include <gemma4/error.hpp>
#include <gemma4/generate/chat.hpp>
#include <gemma4/io/binary_stream.hpp>
#include <gemma4/io/config_json.hpp>
#include <gemma4/kv/kv_cache.hpp>
#include <gemma4/kv/kv_state.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace gemma4 {
inline namespace GEMMA4_ABI {

inline constexpr std::array<char, 8> kSessionFileMagic = {'G', 'E', 'M', 'M', 'A', '4', 'S', 'S'};
inline constexpr std::uint32_t kSessionFileVersion = 1;
inline constexpr std::size_t kSessionHeaderBytes = 64;
/// The 12B's config JSON has about 2 KB; anything far larger is not a config.
inline constexpr std::uint32_t kSessionMaxConfigBytes = 64 * 1024;

enum class SessionFileKind : std::uint8_t { Session = 0, Chat = 1 };

/// The random stream a session draws from (see Session::generate): whether a call has started
/// it, the seed it started from, and the generator's state now.
struct SessionRandomState {
    bool started = false;
    std::uint64_t seed = 0;
    std::array<std::uint64_t, 4> state{};
};

/// What a ChatSession keeps besides its Session.
struct ChatState {
    ChatOptions options{};
    std::vector<ChatMessage> pending_messages{};  ///< added but not yet sent (the system prompt)
    std::string last_reply{};                     ///< the model's last reply, as decoded
    bool first_turn = true;
};

/// A session's state as read from a file: a cache holding one sequence, and the rest.
template <class T>
struct SessionFileContents {
    KVCache<T> cache;
    SeqId seq = -1;
    std::vector<std::int32_t> history;
    std::vector<std::int32_t> pending;
    SessionRandomState random;
    std::optional<ChatState> chat;
};

/// The model's config as session files hold it: config_to_json, keys sorted, no spaces.
inline std::string canonical_config_json(const Gemma4Config& config) { return config_to_json(config).dump(); }

/// FNV-1a 64 of the canonical config JSON, then the scalar's byte count and the KV dtype.
inline std::uint64_t session_fingerprint(const std::string& config_json, std::uint8_t scalar_bytes, KVDtype kv_dtype) {
    Fnv1a64 h;
    h.update(config_json.data(), config_json.size());
    const std::uint8_t tail[2] = {scalar_bytes, static_cast<std::uint8_t>(kv_dtype)};
    h.update(tail, 2);
    return h.value();
}

namespace detail {

inline const char* kv_dtype_name(KVDtype d) { return d == KVDtype::Int8 ? "Int8" : "Float"; }
inline const char* scalar_name(std::uint8_t bytes) { return bytes == 4 ? "float" : bytes == 8 ? "double" : "?"; }
inline const char* session_kind_name(SessionFileKind k) { return k == SessionFileKind::Chat ? "a ChatSession" : "a Session"; }

struct SessionHeader {
    std::uint32_t version = kSessionFileVersion;
    std::uint32_t config_bytes = 0;
    std::uint64_t fingerprint = 0;
    std::uint8_t scalar_bytes = 0;
    std::uint8_t kv_dtype = 0;
    std::uint8_t kind = 0;
    std::uint64_t payload_bytes = 0;
    std::uint64_t payload_checksum = 0;
    std::uint64_t header_checksum = 0;
};

inline std::array<std::byte, kSessionHeaderBytes> encode_header(const SessionHeader& h) {
    std::array<std::byte, kSessionHeaderBytes> b{};
    std::memcpy(b.data(), kSessionFileMagic.data(), 8);
    store_le(b.data() + 8, h.version);
    store_le(b.data() + 12, h.config_bytes);
    store_le(b.data() + 16, h.fingerprint);
    b[24] = std::byte{h.scalar_bytes};
    b[25] = std::byte{h.kv_dtype};
    b[26] = std::byte{h.kind};
    store_le(b.data() + 32, h.payload_bytes);
    store_le(b.data() + 40, h.payload_checksum);
    store_le(b.data() + 48, h.header_checksum);
    return b;
}

/// FNV-1a 64 of the header with its checksum field as zero, then the config JSON.
inline std::uint64_t header_checksum(std::array<std::byte, kSessionHeaderBytes> header, const std::string& config_json) {
    std::fill_n(header.data() + 48, 8, std::byte{0});
    Fnv1a64 h;
    h.update(header);
    h.update(config_json.data(), config_json.size());
    return h.value();
}

/// "a.b: 1 in the file, 2 in this model" for the first few fields that differ.
inline void diff_json(const nlohmann::json& file, const nlohmann::json& model, const std::string& at, std::vector<std::string>& out) {
    if (out.size() >= 4 || file == model) return;
    if (file.is_object() && model.is_object()) {
        for (auto it = model.begin(); it != model.end(); ++it) {
            const std::string key = at.empty() ? it.key() : at + "." + it.key();
            if (!file.contains(it.key())) out.push_back(key + ": absent in the file, " + it->dump() + " in this model");
            else diff_json(file[it.key()], *it, key, out);
            if (out.size() >= 4) return;
        }
        for (auto it = file.begin(); it != file.end() && out.size() < 4; ++it)
            if (!model.contains(it.key())) out.push_back((at.empty() ? it.key() : at + "." + it.key()) + ": in the file only");
        return;
    }
    std::string f = file.dump(), m = model.dump();
    if (f.size() > 80) f = f.substr(0, 77) + "...";
    if (m.size() > 80) m = m.substr(0, 77) + "...";
    out.push_back(at + ": " + f + " in the file, " + m + " in this model");
}

inline std::string describe_config_difference(const std::string& file_json, const std::string& model_json) {
    const nlohmann::json file = nlohmann::json::parse(file_json, nullptr, /*allow_exceptions=*/false);
    if (file.is_discarded()) return "its config is not valid JSON";
    std::vector<std::string> diffs;
    diff_json(file, nlohmann::json::parse(model_json), "", diffs);
    if (diffs.empty()) return "the configs differ";
    std::string text;
    for (const auto& d : diffs) text += (text.empty() ? "" : "; ") + d;
    return text;
}

template <class T>
void write_session_file(const std::filesystem::path& path, const Gemma4Config& config, const KVCache<T>& cache, SeqId seq,
                        std::span<const std::int32_t> history, std::span<const std::int32_t> pending, const SessionRandomState& random,
                        const ChatState* chat) {
    const std::string file = path.string();
    require_little_endian(file);
    const std::string config_json = canonical_config_json(config);
    SessionHeader h;
    h.config_bytes = static_cast<std::uint32_t>(config_json.size());
    h.scalar_bytes = static_cast<std::uint8_t>(sizeof(T));
    h.kv_dtype = static_cast<std::uint8_t>(cache.options().kv_dtype);
    h.kind = static_cast<std::uint8_t>(chat ? SessionFileKind::Chat : SessionFileKind::Session);
    h.fingerprint = session_fingerprint(config_json, h.scalar_bytes, cache.options().kv_dtype);

    std::filesystem::path tmp = path;
    tmp += ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) throw IoError(tmp.string() + ": cannot open for writing");
        const auto placeholder = encode_header(h);
        out.write(reinterpret_cast<const char*>(placeholder.data()), kSessionHeaderBytes);
        out.write(config_json.data(), static_cast<std::streamsize>(config_json.size()));
        BinaryWriter w(out, tmp.string());
        w.ids(history);
        w.ids(pending);
        w.u8(random.started);
        w.u64(random.seed);
        for (const std::uint64_t word : random.state) w.u64(word);
        write_kv_sequence(w, cache, seq);
        if (chat) {
            w.u8(chat->first_turn);
            w.u8(chat->options.add_generation_prompt);
            w.u8(chat->options.enable_thinking);
            w.u8(chat->options.keep_thoughts);
            w.string(chat->last_reply);
            w.u64(chat->pending_messages.size());
            for (const ChatMessage& m : chat->pending_messages) {
                w.string(m.role);
                w.string(m.content);
            }
        }
        h.payload_bytes = w.written();
        h.payload_checksum = w.checksum();
        h.header_checksum = header_checksum(encode_header(h), config_json);
        const auto header = encode_header(h);
        out.seekp(0);
        out.write(reinterpret_cast<const char*>(header.data()), kSessionHeaderBytes);
        out.flush();
        if (!out) throw IoError(tmp.string() + ": write failed");
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) throw IoError(file + ": cannot replace it with " + tmp.string() + ": " + ec.message());
}

/// A session file's header and config, read and checked against the file's `size`: FormatError
/// for a bad one (the payload is not read yet).
inline SessionHeader read_session_header(std::istream& in, const std::string& file, std::uint64_t size, std::string& config_json) {
    const auto fail = [&](const std::string& what) { throw FormatError(file + ": " + what); };
    std::array<std::byte, kSessionHeaderBytes> raw;
    in.read(reinterpret_cast<char*>(raw.data()), kSessionHeaderBytes);
    if (!in) throw IoError(file + ": read failed");
    if (std::memcmp(raw.data(), kSessionFileMagic.data(), 8) != 0) fail("not a gemma4 session file (no GEMMA4SS magic)");
    SessionHeader h;
    h.version = load_le<std::uint32_t>(raw.data() + 8);
    if (h.version != kSessionFileVersion)
        fail("session file version " + std::to_string(h.version) + "; this library reads version " + std::to_string(kSessionFileVersion));
    h.config_bytes = load_le<std::uint32_t>(raw.data() + 12);
    if (h.config_bytes > kSessionMaxConfigBytes || h.config_bytes > size - kSessionHeaderBytes)
        fail("header: a config of " + std::to_string(h.config_bytes) + " bytes does not fit (file of " + std::to_string(size) +
             " bytes, at most " + std::to_string(kSessionMaxConfigBytes) + ")");
    config_json.assign(h.config_bytes, '\0');
    in.read(config_json.data(), static_cast<std::streamsize>(h.config_bytes));
    if (!in) throw IoError(file + ": read failed");
    h.header_checksum = load_le<std::uint64_t>(raw.data() + 48);
    if (header_checksum(raw, config_json) != h.header_checksum) fail("header checksum mismatch: the file is corrupted");
    h.fingerprint = load_le<std::uint64_t>(raw.data() + 16);
    h.scalar_bytes = static_cast<std::uint8_t>(raw[24]);
    h.kv_dtype = static_cast<std::uint8_t>(raw[25]);
    h.kind = static_cast<std::uint8_t>(raw[26]);
    h.payload_bytes = load_le<std::uint64_t>(raw.data() + 32);
    h.payload_checksum = load_le<std::uint64_t>(raw.data() + 40);
    for (const std::size_t i : {27, 28, 29, 30, 31, 56, 57, 58, 59, 60, 61, 62, 63})
        if (raw[i] != std::byte{0}) fail("header: reserved byte " + std::to_string(i) + " is not zero");
    if (h.scalar_bytes != 4 && h.scalar_bytes != 8) fail("header: scalar size " + std::to_string(h.scalar_bytes) + " (expected 4 or 8)");
    if (h.kv_dtype > 1) fail("header: KV dtype " + std::to_string(h.kv_dtype) + " (expected 0 or 1)");
    if (h.kind > 1) fail("header: session kind " + std::to_string(h.kind) + " (expected 0 or 1)");
    if (h.fingerprint != session_fingerprint(config_json, h.scalar_bytes, static_cast<KVDtype>(h.kv_dtype)))
        fail("header: the model fingerprint does not match the config it holds");
    const std::uint64_t described = kSessionHeaderBytes + h.config_bytes;
    if (h.payload_bytes != size - described)
        fail(std::string(h.payload_bytes > size - described ? "truncated: " : "trailing bytes: ") + std::to_string(size) +
             " bytes, the header describes " +
             (h.payload_bytes > size - described ? std::to_string(described) + " + " + std::to_string(h.payload_bytes)
                                                 : std::to_string(described + h.payload_bytes)));
    return h;
}

/// InvalidArgument or ConfigError unless the file `h` describes is for this model, scalar type,
/// KV dtype and session kind.
template <class T>
void check_session_model(const SessionHeader& h, const std::string& file, const std::string& config_json, const Gemma4Config& config,
                         const KVCacheOptions& cache_options, SessionFileKind expected) {
    if (h.scalar_bytes != sizeof(T))
        throw InvalidArgument(file + ": saved from a model computing in " + scalar_name(h.scalar_bytes) + ", this one computes in " +
                              scalar_name(sizeof(T)));
    if (static_cast<KVDtype>(h.kv_dtype) != cache_options.kv_dtype)
        throw InvalidArgument(file + ": holds a " + kv_dtype_name(static_cast<KVDtype>(h.kv_dtype)) + " KV cache, this session's is " +
                              kv_dtype_name(cache_options.kv_dtype));
    const std::string model_json = canonical_config_json(config);
    if (config_json != model_json)
        throw ConfigError(file + ": saved for a different model (fingerprint " + std::to_string(h.fingerprint) + ", this model's " +
                          std::to_string(session_fingerprint(model_json, h.scalar_bytes, cache_options.kv_dtype)) +
                          "): " + describe_config_difference(config_json, model_json));
    if (static_cast<SessionFileKind>(h.kind) != expected)
        throw InvalidArgument(file + ": holds " + session_kind_name(static_cast<SessionFileKind>(h.kind)) + "; load it into " +
                              session_kind_name(static_cast<SessionFileKind>(h.kind)) + ", not " + session_kind_name(expected));
}

/// The chat's own state after the session's fields (ChatSession files).
inline ChatState read_chat_state(BinaryReader& r) {
        ChatState c;
        c.first_turn = r.boolean("chat.first_turn");
        c.options.add_generation_prompt = r.boolean("chat.add_generation_prompt");
        c.options.enable_thinking = r.boolean("chat.enable_thinking");
        c.options.keep_thoughts = r.boolean("chat.keep_thoughts");
        c.last_reply = r.string("chat.last_reply", r.left());
        const std::uint64_t n = r.count("chat.pending_messages", r.left() / 16, 16);
        for (std::uint64_t i = 0; i < n; ++i) {
            ChatMessage m;
            m.role = r.string("chat.pending_messages.role", 16);
            try {
                (void)detail::chat_role(m.role, static_cast<std::size_t>(i), "chat.pending_messages");
            } catch (const InvalidArgument& e) {
                r.fail(e.what());
            }
            m.content = r.string("chat.pending_messages.content", r.left());
            c.pending_messages.push_back(std::move(m));
        }
    return c;
}

template <class T>
SessionFileContents<T> read_session_file(const std::filesystem::path& path, const Gemma4Config& config, const KVCacheOptions& cache_options,
                                         SessionFileKind expected) {
    const std::string file = path.string();
    require_little_endian(file);
    std::ifstream in(path, std::ios::binary);
    if (!in) throw IoError(file + ": cannot open");
    in.seekg(0, std::ios::end);
    const std::streamoff end = in.tellg();
    in.seekg(0);
    if (end < 0 || !in) throw IoError(file + ": cannot read its size");
    const auto size = static_cast<std::uint64_t>(end);
    if (size < kSessionHeaderBytes)
        throw FormatError(file + ": truncated: " + std::to_string(size) + " bytes, shorter than the " + std::to_string(kSessionHeaderBytes) +
                          "-byte header");
    std::string config_json;
    const SessionHeader h = read_session_header(in, file, size, config_json);
    // The file is whole; is it this model's?
    check_session_model<T>(h, file, config_json, config, cache_options, expected);

    BinaryReader r(in, file, h.payload_bytes);
    SessionFileContents<T> s{KVCache<T>(config, cache_options), -1, {}, {}, {}, std::nullopt};
    const auto max_positions = static_cast<std::uint64_t>(config.max_position_embeddings);
    s.history = r.ids("history", max_positions + 1, config.vocab_size);
    s.pending = r.ids("pending", 1, config.vocab_size);
    for (const std::int32_t id : s.pending)  // a sampled id, and placeholders are never sampled
        if (id == config.tokens.image || id == config.tokens.audio || id == config.tokens.video)
            r.fail("pending: id " + std::to_string(id) + " is an image/audio placeholder");
    s.random.started = r.boolean("random.started");
    s.random.seed = r.u64("random.seed");
    for (auto& word : s.random.state) word = r.u64("random.state");
    if (s.random.started && !(s.random.state[0] | s.random.state[1] | s.random.state[2] | s.random.state[3]))
        r.fail("random.state: all zero, which the generator never reaches");
    s.seq = read_kv_sequence(r, s.cache);
    const std::int64_t length = s.cache.length(s.seq);
    if (static_cast<std::int64_t>(s.history.size()) != length + static_cast<std::int64_t>(s.pending.size()))
        r.fail("history: " + std::to_string(s.history.size()) + " ids, but the cache holds " + std::to_string(length) + " and " +
               std::to_string(s.pending.size()) + " are pending");
    if (!std::equal(s.pending.begin(), s.pending.end(), s.history.end() - static_cast<std::ptrdiff_t>(s.pending.size())))
        r.fail("pending: the pending ids are not the last ids of the history");
    if (expected == SessionFileKind::Chat) s.chat = read_chat_state(r);
    if (r.left() != 0) r.fail("payload: " + std::to_string(r.left()) + " bytes after the last field");
    if (r.checksum() != h.payload_checksum) r.fail("payload checksum mismatch: the file is corrupted");
    return s;
}

}  // namespace detail

}  // namespace GEMMA4_ABI
}  // namespace gemma4
