#include "graph_dot.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <unordered_map>

#include "errors.hpp"

extern char** environ;

namespace xtgrad {

namespace {

// What each fused op computes in one node (engine/ops/fused_linear.hpp).
constexpr std::array<std::pair<std::string_view, const char*>, 2> k_fused_ops{{
    {"activation_linear", "fuses f(h) -> linear"},
    {"gated_linear", "fuses u * f(g) -> linear"},
}};

// A DOT string literal's content: quotes and backslashes escaped, newlines
// as DOT's centred line break.
std::string dot_escaped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n')
      out += "\\n";
    else if (c != '\r')
      out += c;
  }
  return out;
}

template <class T>
constexpr const char* dtype_name() {
  return std::is_same_v<T, float> ? "float32" : "float64";
}

// The style attributes of each kind of node.
constexpr const char* k_param_style = "shape=box, style=filled, fillcolor=\"#cfe2f3\"";
constexpr const char* k_input_style = "shape=ellipse, style=filled, fillcolor=\"#d9ead3\"";
constexpr const char* k_constant_style =
    "shape=ellipse, style=\"filled,dashed\", fillcolor=\"#eeeeee\", fontcolor=\"#555555\"";
constexpr const char* k_op_style = "shape=box, style=rounded";
constexpr const char* k_no_grad_op_style =
    "shape=box, style=\"rounded,dashed\", color=\"#888888\", fontcolor=\"#555555\"";
constexpr const char* k_fused_style = "shape=box, style=\"rounded,filled\", fillcolor=\"#fce5cd\"";
constexpr const char* k_output_style = ", color=\"#cc0000\", penwidth=2, peripheries=2";

}  // namespace

const char* fused_description(const char* op) {
  if (op == nullptr) return nullptr;
  for (const auto& [name, description] : k_fused_ops)
    if (name == op) return description;
  return nullptr;
}

template <class T>
std::string to_dot(const Tape<T>& tape, const std::vector<Var<NoDeduce<T>>>& outputs,
                   const ParameterNames<NoDeduce<T>>& names) {
  static constexpr const char* fn = "to_dot";
  std::unordered_map<const Parameter<T>*, const std::string*> name_of;
  for (std::size_t k = 0; k < names.size(); ++k) {
    if (names[k].second == nullptr)
      detail::fail_argument(fn, "names",
                            "holds a null Parameter pointer for the name " +
                                detail::quoted(names[k].first) + " (entry " + std::to_string(k) +
                                ")");
    name_of.emplace(names[k].second, &names[k].first);  // the first name of a shared Parameter
  }
  const std::size_t n = tape.size();
  std::vector<char> shown(n, outputs.empty() ? 1 : 0), is_output(n, 0);
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    tape.check_owns(outputs[k], fn, ("outputs[" + std::to_string(k) + "]").c_str());
    shown[outputs[k].index()] = is_output[outputs[k].index()] = 1;
  }
  // Creation order is topological: one reverse pass marks every ancestor.
  for (std::size_t i = n; i-- > 0;)
    if (shown[i])
      for (std::size_t k = 0; k < tape.node_parent_count(i); ++k) shown[tape.node_parent(i, k)] = 1;

  std::string out =
      "digraph tape {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
      "  edge [arrowsize=0.6, color=\"#555555\"];\n";
  for (std::size_t i = 0; i < n; ++i) {
    if (!shown[i]) continue;
    const char* op = tape.node_op(i);
    const Parameter<T>* param = tape.node_param(i);
    const std::string shape = detail::shape_str(tape.value(i).shape()) + " " + dtype_name<T>();
    std::string label, style;
    if (param) {
      const auto found = name_of.find(param);
      label = (found != name_of.end() ? *found->second : param->name) + "\n" + shape;
      style = k_param_style;
    } else if (tape.node_is_leaf(i)) {
      const bool input = tape.requires_grad(i);
      label = std::string(input ? "input" : "constant") + "  #" + std::to_string(i) + "\n" + shape;
      style = input ? k_input_style : k_constant_style;
    } else {
      label = std::string(op) + "  #" + std::to_string(i);
      const char* fused = fused_description(op);
      if (fused) label += "\n" + std::string(fused);
      label += "\n" + shape;
      style = !tape.requires_grad(i) ? k_no_grad_op_style : fused ? k_fused_style : k_op_style;
    }
    if (is_output[i]) {
      label = "output: " + label;
      style += k_output_style;
    }
    out += "  n" + std::to_string(i) + " [label=\"" + dot_escaped(label) + "\", " + style + "];\n";
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (!shown[i]) continue;
    const std::size_t count = tape.node_parent_count(i);
    for (std::size_t k = 0; k < count; ++k) {
      const std::size_t parent = tape.node_parent(i, k);
      bool repeated = false;
      for (std::size_t j = 0; j < k; ++j) repeated = repeated || tape.node_parent(i, j) == parent;
      if (!repeated) out += "  n" + std::to_string(parent) + " -> n" + std::to_string(i) + ";\n";
    }
  }
  return out + "}\n";
}

template <class T>
std::string to_dot(const Tape<T>& tape, const Var<NoDeduce<T>>& y,
                   const ParameterNames<NoDeduce<T>>& names) {
  return to_dot(tape, std::vector<Var<T>>{y}, names);
}

bool graphviz_available() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  std::string_view rest(path);
  while (true) {
    const std::size_t colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/dot";
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    if (colon == std::string_view::npos) return false;
    rest.remove_prefix(colon + 1);
  }
}

void write_graph(const std::string& dot, const std::string& path) {
  static constexpr const char* fn = "write_graph";
  namespace fs = std::filesystem;
  const std::string ext = fs::path(path).extension().string();
  if (path.empty() || (ext != ".dot" && ext != ".svg" && ext != ".png" && ext != ".pdf"))
    detail::fail_argument(fn, "path",
                          detail::quoted(path) + " must end in .dot, .svg, .png or .pdf");
  if (ext != ".dot" && !graphviz_available())
    detail::fail_io(fn, "cannot write " + detail::quoted(path) +
                            ": Graphviz's 'dot' program is not on PATH (install the graphviz "
                            "package, e.g. apt-get install graphviz), or write the text to a .dot "
                            "file and render it elsewhere");
  const std::string pid = std::to_string(::getpid());
  const std::string text_file = path + ".tmp-" + pid + ".dot";
  const std::string image_file = path + ".tmp-" + pid + ext;
  {
    std::ofstream file(text_file, std::ios::binary | std::ios::trunc);
    file << dot;
    file.close();
    if (!file) {
      std::remove(text_file.c_str());
      detail::fail_io(fn,
                      "cannot write " + detail::quoted(text_file) + ": " + std::strerror(errno));
    }
  }
  std::string written = text_file;
  if (ext != ".dot") {
    // No shell: the paths reach dot as they are.
    std::string program = "dot", format = "-T" + ext.substr(1), output = "-o" + image_file,
                input = text_file;
    char* argv[] = {program.data(), format.data(), output.data(), input.data(), nullptr};
    pid_t child = 0;
    const int spawn_error = ::posix_spawnp(&child, "dot", nullptr, nullptr, argv, environ);
    int status = 0;
    const bool ran = spawn_error == 0 && ::waitpid(child, &status, 0) == child;
    std::remove(text_file.c_str());
    if (!ran || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::remove(image_file.c_str());
      detail::fail_io(
          fn, "Graphviz's dot could not render " + detail::quoted(path) +
                  (spawn_error ? std::string(": ") + std::strerror(spawn_error)
                               : " (dot exited with status " + std::to_string(WEXITSTATUS(status)) +
                                     "; its message is above)"));
    }
    written = image_file;
  }
  std::error_code error;
  fs::rename(written, path, error);
  if (error) {
    std::remove(written.c_str());
    detail::fail_io(fn, "cannot write " + detail::quoted(path) + ": " + error.message());
  }
}

template std::string to_dot(const Tape<float>&, const Var<float>&, const ParameterNames<float>&);
template std::string to_dot(const Tape<double>&, const Var<double>&, const ParameterNames<double>&);
template std::string to_dot(const Tape<float>&, const std::vector<Var<float>>&,
                            const ParameterNames<float>&);
template std::string to_dot(const Tape<double>&, const std::vector<Var<double>>&,
                            const ParameterNames<double>&);

}  // namespace xtgrad
