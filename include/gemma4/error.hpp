// gemma4 — error types. Every failure on user input is one of these; the message names the
// file, tensor or field at fault. See docs/errors.md for the full list.
#pragma once

#include <gemma4/abi.hpp>

#include <stdexcept>
#include <string>

namespace gemma4 {
inline namespace GEMMA4_ABI {

/// Base of every error the library throws on bad input or misuse.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A file that cannot be opened, read or mapped (missing, empty, truncated).
class IoError : public Error {
public:
    using Error::Error;
};

/// A file whose bytes do not follow its format (safetensors header, .npy, JSON syntax).
class FormatError : public Error {
public:
    using Error::Error;
};

/// A tensor that is missing, has the wrong shape or an unsupported dtype.
class ShapeError : public Error {
public:
    using Error::Error;
};

/// A config.json field that is missing, of the wrong type, out of range or unsupported.
class ConfigError : public Error {
public:
    using Error::Error;
};

/// tokenizer.json problems, unknown tokens, invalid UTF-8 where it is not accepted.
class TokenizerError : public Error {
public:
    using Error::Error;
};

/// A sequence that would go past the context (max_position_embeddings or the cache's budget).
class ContextLengthError : public Error {
public:
    using Error::Error;
};

/// Arguments that make no sense (ids outside the vocabulary, an empty id list, bad options).
class InvalidArgument : public Error {
public:
    using Error::Error;
};

/// A grammar (GBNF text) or a JSON Schema that cannot be compiled: the message names the line
/// and column, or the keyword and its JSON pointer. Also thrown when a token the constraint does
/// not allow is fed to it.
class GrammarError : public InvalidArgument {
public:
    using InvalidArgument::InvalidArgument;
};

/// Engine::submit cannot take the request now: the waiting queue is at its bound
/// (EngineOptions::max_queue) or the engine is shutting down. Retrying later may succeed.
class QueueFullError : public Error {
public:
    using Error::Error;
};

}  // namespace GEMMA4_ABI
}  // namespace gemma4
