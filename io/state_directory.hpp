#pragma once
// Training-state directories: a StateDict<T> (named arrays, int64, float64
// and string scalars; engine/state_dict.hpp) on disk, for the state of an
// optimizer and its schedule beside a model's parameters, so that an
// interrupted run resumes bit for bit. training/training_state.hpp joins a
// model, an optimizer and a schedule into one such directory.
//
//   manifest.tsv   the arrays, exactly as in a checkpoint (checkpoint.hpp):
//                  "xtgrad-checkpoint 1", then name \t dtype \t shape \t file
//   <name>.npy     each array (numpy.load reads it)
//   scalars.tsv    "xtgrad-scalars 1", then one line per scalar:
//                  int64 \t name \t decimal integer
//                  float64 \t name \t the shortest decimal that reads back
//                                     as the same double (std::to_chars)
//                  string \t name \t text without control characters
//
// Every value round-trips exactly: arrays bit for bit, integers as int64
// (a step count never passes through a double), reals through their
// shortest exact decimal. Names must be plain file names (no '/', no
// control characters, no leading '.').
//
// save_state_directory is atomic as save_checkpoint is (a fresh sibling
// directory swapped into place; a failed save leaves the previous one whole),
// and replaces only an absent or empty directory, a checkpoint or a
// training-state directory.
//
// load_state_directory is written for hostile directories and is all or
// nothing (it returns a complete StateDict or throws). Memory is bounded by
// `max_array_bytes`, the caller's limit on the total size of the arrays: the
// manifest's declared sizes are summed (overflow-checked) and refused above
// the limit before any array is read, each .npy header must agree with the
// manifest before its data is read, and manifest.tsv and scalars.tsv have
// fixed size limits (64 MiB and 16 MiB). Entries are opened as
// load_checkpoint opens them (regular files inside the directory only, never
// blocking). The dtype of every array must be T.
//
// Errors: messages start "xtgrad::<caller>:". std::invalid_argument for bad
// content (a missing or malformed manifest.tsv or scalars.tsv, a corrupt or
// lying .npy, another dtype, arrays larger than the limit, `dir` not a
// directory); std::runtime_error for I/O failures, a missing `dir`, and an
// entry that is not a regular file inside the directory.

#include <cstddef>
#include <filesystem>
#include <string>

#include "../engine/state_dict.hpp"

namespace xtgrad {

template <class T>
void save_state_directory(const std::filesystem::path& dir, const StateDict<T>& state,
                          const std::string& caller = "save_state_directory");

template <class T>
StateDict<T> load_state_directory(const std::filesystem::path& dir, std::size_t max_array_bytes,
                                  const std::string& caller = "load_state_directory");

}  // namespace xtgrad
