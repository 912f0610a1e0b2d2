#pragma once
// The one JSON reader of xtgrad: every JSON text the library reads (module
// configs in checkpoints, Hugging Face config.json files) is parsed here, with
// one set of refusals, each a std::invalid_argument naming the caller's
// function and what was read:
//
//   - more than `max_bytes` bytes (a file is refused from its size, unread);
//   - a NUL byte anywhere (nlohmann's lexer would take it for the end of the
//     text and hide what follows; JSON has no raw NUL, even in a string);
//   - anything but whitespace (space, tab, CR, LF) after the one value;
//   - nesting deeper than k_max_json_depth (refused before the parser goes
//     deeper);
//   - with JsonKeys::unique, a key twice in one object (xtgrad's own
//     formats); with JsonKeys::last_wins the last value is kept, as Python's
//     json.loads keeps it (files written by Python tools: config.json).
//
// The safetensors header is the exception on purpose: it is parsed as a
// stream of events straight into its entries (io/safetensors_header.cpp),
// with the same trailing-byte and NUL rules.

#include <cstddef>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace xtgrad::detail {

inline constexpr int k_max_json_depth = 128;

enum class JsonKeys { unique, last_wins };

// Parses `text`. Messages read "xtgrad::<function>: <subject><what>", so
// `subject` names the text and ends with its separator, e.g.
// "config '/m/config.json': " or "'m/manifest.tsv' line 2: module config ".
nlohmann::ordered_json read_json(const std::string& text, const std::string& function,
                                 const std::string& subject, std::size_t max_bytes,
                                 JsonKeys keys = JsonKeys::unique);

// Opens the regular file at `path` (open_regular_file), refuses it from its
// size when larger than `max_bytes`, then reads and parses it as above.
nlohmann::ordered_json read_json_file(const std::filesystem::path& path,
                                      const std::string& function, const std::string& subject,
                                      std::size_t max_bytes, JsonKeys keys = JsonKeys::unique);

}  // namespace xtgrad::detail
