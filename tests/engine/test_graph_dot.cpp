// to_dot and write_graph: the DOT text of a recording, checked by counting
// what Graphviz itself parses from it (dot -Tplain) when Graphviz is
// installed, and by reading the text otherwise.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>

#include <xtgrad/engine/engine.hpp>
#include <xtgrad/modules/modules.hpp>

#include "support/test_helpers.hpp"

using namespace xtgrad;
using xtgrad::testing::message_contains;
using xtgrad::testing::random_array;
using xtgrad::testing::read_file;
using xtgrad::testing::write_file;
namespace fs = std::filesystem;

namespace {

// A fresh directory under the build tree for this test's files.
fs::path scratch_dir(const std::string& name) {
  const fs::path dir = fs::path(XTGRAD_BINARY_DIR) / "test_graph_dot" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Visible in the test log: this check needs Graphviz, which is not installed.
bool graphviz_or_skip(const char* check) {
  if (graphviz_available()) return true;
  std::cerr << "SKIPPED (Graphviz's dot is not installed): " << check << "\n";
  MESSAGE("SKIPPED (Graphviz's dot is not installed): " << check);
  return false;
}

// The node and edge statements of the DOT text, as Graphviz parses them
// (dot -Tplain prints one "node" and one "edge" line each). Fails the test
// when dot rejects the text.
struct Parsed {
  std::size_t nodes = 0, edges = 0;
};
Parsed parse_with_dot(const std::string& dot, const fs::path& dir) {
  write_file(dir / "graph.dot", dot);
  const fs::path plain = dir / "graph.plain";
  const std::string command =
      "dot -Tplain '" + (dir / "graph.dot").string() + "' > '" + plain.string() + "'";
  REQUIRE(std::system(command.c_str()) == 0);
  Parsed parsed;
  std::istringstream lines(read_file(plain));
  for (std::string line; std::getline(lines, line);) {
    parsed.nodes += line.rfind("node ", 0) == 0;
    parsed.edges += line.rfind("edge ", 0) == 0;
  }
  return parsed;
}

// The statement of node `index` in the DOT text ("  n3 [label=...];").
std::string node_line(const std::string& dot, std::size_t index) {
  const std::string start = "  n" + std::to_string(index) + " [";
  const std::size_t at = dot.find(start);
  REQUIRE(at != std::string::npos);
  return dot.substr(at, dot.find('\n', at) - at);
}

// Lines "  n<index> [label=...": the node statements to_dot writes.
std::size_t count_node_statements(const std::string& dot) {
  std::size_t count = 0;
  std::istringstream lines(dot);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  n", 0) != 0) continue;
    std::size_t at = 3;
    while (at < line.size() && std::isdigit(static_cast<unsigned char>(line[at]))) ++at;
    count += at > 3 && line.compare(at, 9, " [label=\"") == 0;
  }
  return count;
}

}  // namespace

TEST_CASE("graph_dot: a FeedForward step has one node per tape node and every parameter name") {
  Generator generator(7);
  FeedForward<float> ffn(2, 16, Activation::relu, generator);
  Tape<float> tape;
  const Var<float> x = tape.leaf(random_array<float>({8, 2}, 1), false);
  const Var<float> y = tape.leaf(random_array<float>({8, 2}, 2), false);
  const Var<float> loss = mse(ffn(x), y);
  // x, y, four Parameters, linear, activation_linear (relu fused into the
  // second layer), mse; edges: linear 3, activation_linear 3, mse 2.
  REQUIRE(tape.size() == 9);
  const std::string dot = to_dot(tape, loss, ffn.named_parameters());
  CHECK(count_node_statements(dot) == tape.size());
  for (const char* name : {"w1.weight", "w1.bias", "w2.weight", "w2.bias"})
    CHECK_MESSAGE(dot.find(std::string("label=\"") + name + "\\n") != std::string::npos, name);
  CHECK(dot.find("[16, 2] float32") != std::string::npos);  // w1.weight's shape and dtype
  CHECK(dot.find("[8, 16] float32") != std::string::npos);  // the hidden layer
  CHECK(node_line(dot, loss.index()).find("output: mse") != std::string::npos);
  CHECK(node_line(dot, loss.index()).find("peripheries=2") != std::string::npos);
  const std::string fused = node_line(dot, loss.index() - 1);
  CHECK(fused.find("activation_linear") != std::string::npos);
  CHECK(fused.find("fuses f(h) -> linear") != std::string::npos);
  CHECK(node_line(dot, x.index()).find("constant") != std::string::npos);
  if (!graphviz_or_skip("dot -Tplain parses a FeedForward graph")) return;
  const Parsed parsed = parse_with_dot(dot, scratch_dir("feedforward"));
  CHECK(parsed.nodes == tape.size());
  CHECK(parsed.edges == 8);
}

TEST_CASE("graph_dot: a GatedFFN step shows gated_linear and what it fuses") {
  Generator generator(8);
  GatedFFN<double> ffn(3, 8, 3, Activation::silu, GatedBias::none(), generator);
  Tape<double> tape;
  const Var<double> x = tape.leaf(random_array({4, 3}, 15));
  const Var<double> y = sum(ffn(x));
  const std::string dot = to_dot(tape, y, ffn.named_parameters());
  CHECK(count_node_statements(dot) == tape.size());
  const std::string fused = node_line(dot, y.index() - 1);
  CHECK(fused.find("gated_linear") != std::string::npos);
  CHECK(fused.find("fuses u * f(g) -> linear") != std::string::npos);
  CHECK(node_line(dot, x.index()).find("input") != std::string::npos);
  for (const auto& entry : ffn.named_parameters()) {
    const std::string& name = entry.first;  // not a binding: CHECK_MESSAGE captures it
    CHECK_MESSAGE(dot.find("label=\"" + name + "\\n") != std::string::npos, name);
  }
  CHECK(fused_description("linear") == nullptr);
  CHECK(fused_description(nullptr) == nullptr);
}

TEST_CASE("graph_dot: only the part of the tape leading to y, leaves told from constants") {
  Tape<double> tape;
  Parameter<double> w("w", random_array({3, 4}, 3));
  const Var<double> x = tape.leaf(random_array({5, 4}, 4));         // 0: input with gradient
  const Var<double> c = tape.leaf(random_array({5, 3}, 5), false);  // 1: constant
  const Var<double> wv = tape.param(w);                             // 2
  const Var<double> h = linear(x, wv);                              // 3: parents x, w, x
  const Var<double> side = exp(c);                                  // 4: not read by y
  const Var<double> c2 = mul(c, c);                                 // 5: constants only
  const Var<double> y = sum(add(h, c2));                            // 6 add, 7 sum
  REQUIRE(tape.size() == 8);
  (void)side;
  const std::string dot = to_dot(tape, y, {{"layer.weight", &w}});
  CHECK(count_node_statements(dot) == 7);  // all but exp
  CHECK(dot.find("exp") == std::string::npos);
  CHECK(dot.find("n4") == std::string::npos);
  CHECK(node_line(dot, 0).find("input") != std::string::npos);
  CHECK(node_line(dot, 1).find("constant") != std::string::npos);
  CHECK(node_line(dot, 1).find("dashed") != std::string::npos);
  CHECK(node_line(dot, 2).find("layer.weight\\n[3, 4] float64") != std::string::npos);
  CHECK(node_line(dot, 5).find("dashed") != std::string::npos);   // mul of constants: no gradient
  CHECK(node_line(dot, 3).find("dashed") == std::string::npos);   // linear carries a gradient
  CHECK(dot.find("n0 -> n3;\n  n0 -> n3") == std::string::npos);  // x listed twice, one edge

  const std::string whole = to_dot(tape, std::vector<Var<double>>{});
  CHECK(count_node_statements(whole) == tape.size());
  CHECK(node_line(whole, 2).find("label=\"w\\n") != std::string::npos);  // Parameter::name
  CHECK(whole.find("output") == std::string::npos);
  if (!graphviz_or_skip("dot -Tplain parses a partial graph")) return;
  // edges: linear x, w; mul c; add h, c2; sum add = 6
  const Parsed parsed = parse_with_dot(dot, scratch_dir("partial"));
  CHECK(parsed.nodes == 7);
  CHECK(parsed.edges == 6);
  const Parsed all = parse_with_dot(whole, scratch_dir("whole"));
  CHECK(all.nodes == tape.size());
  CHECK(all.edges == 7);
}

TEST_CASE("graph_dot: names with quotes and backslashes stay one valid DOT string") {
  Tape<float> tape;
  Parameter<float> p("p", random_array<float>({2}, 6));
  const Var<float> y = sum(tape.param(p));
  const std::string dot = to_dot(tape, y, {{"odd \"name\" \\ here\nnext", &p}});
  CHECK(dot.find("odd \\\"name\\\" \\\\ here\\nnext") != std::string::npos);
  if (!graphviz_or_skip("dot -Tplain parses escaped names")) return;
  const Parsed parsed = parse_with_dot(dot, scratch_dir("escaped"));
  CHECK(parsed.nodes == 2);
}

TEST_CASE("graph_dot: write_graph renders .svg and .png with dot and writes .dot as text") {
  Tape<float> tape;
  const Var<float> y = sum(exp(tape.leaf(random_array<float>({3}, 7))));
  const std::string dot = to_dot(tape, y);
  const fs::path dir = scratch_dir("write");
  write_graph(dot, (dir / "g.dot").string());
  CHECK(read_file(dir / "g.dot") == dot);
  if (!graphviz_or_skip("dot -Tsvg renders the graph")) return;
  write_graph(dot, (dir / "g.svg").string());
  const std::string svg = read_file(dir / "g.svg");
  CHECK(svg.find("<svg") != std::string::npos);
  CHECK(svg.find("output: sum") != std::string::npos);
  write_graph(dot, (dir / "g.png").string());
  CHECK(read_file(dir / "g.png").substr(1, 3) == "PNG");
  std::size_t files = 0;  // no temporary file left behind
  for (const auto& entry : fs::directory_iterator(dir)) files += entry.is_regular_file();
  CHECK(files == 3);
}

TEST_CASE("graph_dot: bad input is refused and a failed render keeps the old file") {
  Tape<float> tape, other;
  Parameter<float> p("p", random_array<float>({2}, 8));
  const Var<float> y = sum(tape.param(p));
  CHECK_THROWS_WITH_AS(to_dot(tape, y, {{"p", nullptr}}),
                       doctest::Contains("argument 'names' holds a null Parameter pointer"),
                       std::invalid_argument);
  const Var<float> foreign = other.leaf(random_array<float>({2}, 9));
  CHECK_THROWS_WITH_AS(to_dot(tape, foreign), doctest::Contains("belongs to a different tape"),
                       std::logic_error);
  const Var<float> stale = y;
  tape.clear();
  CHECK_THROWS_WITH_AS(to_dot(tape, stale), doctest::Contains("cleared"), std::logic_error);
  CHECK_THROWS_WITH_AS(to_dot(tape, Var<float>{}), doctest::Contains("empty Var"),
                       std::logic_error);

  const fs::path dir = scratch_dir("errors");
  const std::string old_text = "the old picture";
  write_file(dir / "g.svg", old_text);
  CHECK_THROWS_WITH_AS(write_graph("digraph {}", (dir / "g.jpeg").string()),
                       doctest::Contains("must end in .dot, .svg, .png or .pdf"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(write_graph("digraph {}", ""), doctest::Contains("argument 'path'"),
                       std::invalid_argument);

  // Without Graphviz on PATH: a clear message, and the old file stays.
  const std::string path_before = std::getenv("PATH") ? std::getenv("PATH") : "";
  ::setenv("PATH", dir.c_str(), 1);
  CHECK_FALSE(graphviz_available());
  bool said_so = false;
  try {
    write_graph("digraph { a -> b }", (dir / "g.svg").string());
  } catch (const std::runtime_error& e) {
    said_so = message_contains(e, {"write_graph", "'dot' program is not on PATH", "graphviz"});
  }
  ::setenv("PATH", path_before.c_str(), 1);
  CHECK(said_so);
  CHECK(read_file(dir / "g.svg") == old_text);

  if (!graphviz_or_skip("a DOT syntax error makes dot fail")) return;
  CHECK_THROWS_WITH_AS(write_graph("digraph { a -> ", (dir / "g.svg").string()),
                       doctest::Contains("dot could not render"), std::runtime_error);
  CHECK(read_file(dir / "g.svg") == old_text);
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) files += entry.is_regular_file();
  CHECK(files == 1);
}
