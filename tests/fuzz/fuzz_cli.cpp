// Fuzz target: the kformer program's command line (apps/cli.cpp). The input is split into
// arguments at '\0' and '\n' (argv[0] is "kformer"); parsing may only end normally or in a
// CLI::ParseError (an unknown option, a bad value, --help, ...) or a kformer::Error.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include <kformer/core/error.hpp>

#include "../../apps/cli.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> words = {"kformer"};
  std::string word;
  bool open = false;  // a word has begun (it may be empty: "" is an argument too)
  for (std::size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\0' || c == '\n') {
      words.push_back(word);
      word.clear();
      open = false;
    } else {
      word += c;
      open = true;
    }
  }
  if (open) words.push_back(word);
  std::vector<const char*> argv;
  for (const auto& w : words)
    argv.push_back(w.c_str());

  CLI::App app;
  kformer::app::CliOptions options;
  try {
    kformer::app::parse_command_line(app, options, static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForAllHelp&) {
    (void)app.help("", CLI::AppFormatMode::All);  // what app.exit() would print
  } catch (const CLI::CallForHelp&) {
    (void)app.help();
  } catch (const CLI::ParseError&) {
  } catch (const kformer::Error&) {
  }
  return 0;
}
