// save_run and resume_run (checkpoint.hpp).

#include "checkpoint.hpp"

#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <system_error>

#include <nlohmann/json.hpp>

namespace fashion {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json config_json(const ModelConfig& c) {
  return {{"kind", c.kind},
          {"hidden", c.hidden},
          {"dropout", c.dropout},
          {"patch", c.patch},
          {"width", c.width},
          {"blocks", c.blocks},
          {"token_hidden", c.token_hidden},
          {"channel_hidden", c.channel_hidden}};
}

json history_json(const std::vector<EpochRecord>& history) {
  json out = json::array();
  for (const EpochRecord& r : history)
    out.push_back({{"epoch", r.epoch},
                   {"train_loss", r.train_loss},
                   {"test_loss", r.test_loss},
                   {"test_accuracy", r.test_accuracy},
                   {"lr", r.lr},
                   {"seconds", r.seconds}});
  return out;
}

// Writes `text` to `path` through a temporary file and a rename.
void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path temporary = path.string() + ".tmp" + std::to_string(std::random_device()());
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file << text;
    file.flush();
    if (!file) {
      std::error_code ignored;
      fs::remove(temporary, ignored);
      throw std::runtime_error("cannot write '" + temporary.string() + "'");
    }
  }
  fs::rename(temporary, path);
}

}  // namespace

void save_run(const fs::path& dir, const Classifier& model, const RunState& state) {
  fs::create_directories(dir);
  model.save(dir / "model");
  const json j = {{"format", "train_fashion run"},
                  {"config", config_json(state.config)},
                  {"seed", state.seed},
                  {"history", history_json(state.history)}};
  write_atomically(dir / "state.json", j.dump(2) + "\n");
}

RunState resume_run(const fs::path& dir, Classifier& model, const ModelConfig& config,
                    std::uint64_t seed) {
  const fs::path state_file = dir / "state.json";
  std::ifstream in(state_file);
  if (!in) throw std::invalid_argument("--resume: cannot read '" + state_file.string() + "'");
  json j;
  try {
    in >> j;
    if (j.at("format") != "train_fashion run") throw std::invalid_argument("not a run state");
    if (j.at("config") != config_json(config))
      throw std::invalid_argument("saved with model options " + j.at("config").dump() +
                                  ", this run has " + config_json(config).dump());
    if (j.at("seed").get<std::uint64_t>() != seed)
      throw std::invalid_argument("saved with --seed " + j.at("seed").dump());
    RunState state;
    state.config = config;
    state.seed = seed;
    for (const json& r : j.at("history")) {
      EpochRecord record;
      record.epoch = r.at("epoch").get<std::size_t>();
      record.train_loss = r.at("train_loss").get<double>();
      record.test_loss = r.at("test_loss").get<double>();
      record.test_accuracy = r.at("test_accuracy").get<double>();
      record.lr = r.at("lr").get<double>();
      record.seconds = r.at("seconds").get<double>();
      state.history.push_back(record);
    }
    model.load(dir / "model");
    return state;
  } catch (const json::exception& e) {
    throw std::invalid_argument("--resume: '" + state_file.string() +
                                "' is malformed: " + e.what());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("--resume '" + dir.string() + "': " + e.what());
  }
}

}  // namespace fashion
