// core/safetensors: the golden file of an independent writer (tests/golden/
// make_safetensors_golden.py), round trips of every dtype through the Writer, the exact bytes the
// Writer produces, every kind of corrupt file, and copies into Views on every backend.
#include "support/catch.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <Kokkos_Core.hpp>

#include <kformer/backends/spaces.hpp>
#include <kformer/core/error.hpp>
#include <kformer/core/safetensors.hpp>
#include <kformer/core/safetensors_kokkos.hpp>
#include <kformer/core/tensor.hpp>

#include "support/test_support.hpp"

using namespace kformer;
using namespace kformer::safetensors;

namespace {

// The golden files sit next to this source file.
std::string golden_path(const std::string& name) {
  std::string dir = __FILE__;
  dir.erase(dir.find_last_of('/') + 1);
  return dir + "golden/" + name;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A scratch directory removed with its files at the end of the test.
struct ScratchDir {
  std::string path;
  std::vector<std::string> files;
  ScratchDir() {
    char name[] = "/tmp/kformer-safetensors-XXXXXX";
    path = mkdtemp(name);
  }
  ~ScratchDir() {
    for (const auto& f : files)
      std::remove(f.c_str());
    rmdir(path.c_str());
  }
  std::string file(const std::string& name, const std::string& bytes) {
    const std::string full = path + "/" + name;
    std::ofstream(full, std::ios::binary) << bytes;
    files.push_back(full);
    return full;
  }
};

// A file image from a header text and data bytes, with the header length as given by the format
// (8 bytes, little-endian).
std::string image(const std::string& header, const std::string& data,
                  std::uint64_t header_length = std::uint64_t(-1)) {
  if (header_length == std::uint64_t(-1)) header_length = header.size();
  std::string out;
  for (int b = 0; b < 8; ++b)
    out.push_back(static_cast<char>((header_length >> (8 * b)) & 0xFF));
  return out + header + data;
}

std::string hex_bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (const int b : bytes)
    out.push_back(static_cast<char>(b));
  return out;
}

}  // namespace

TEST_CASE("safetensors reads the golden file of an independent writer", "[core][safetensors]") {
  const std::string path = golden_path("safetensors_golden.safetensors");
  const File file = File::read(path);
  CHECK(file.source() == path);

  // Data order, dtypes and shapes as make_safetensors_golden.py writes them.
  const std::vector<std::string> names = {"u8",  "f64", "flag", "f32",  "f16",  "bf16",
                                          "i64", "i32", "i8",   "step", "empty"};
  REQUIRE(file.tensors().size() == names.size());
  for (std::size_t i = 0; i < names.size(); ++i)
    CHECK(file.tensors()[i].name == names[i]);
  CHECK(file.info("f32").dtype == Dtype::F32);
  CHECK(file.info("f32").shape == std::vector<std::int64_t>{2, 3});
  CHECK(file.info("f64").begin == 3);  // unaligned on purpose
  CHECK(file.info("f64").end == 27);
  CHECK(file.info("bf16").dtype == Dtype::BF16);
  CHECK(file.info("flag").dtype == Dtype::BOOL);
  CHECK(file.info("step").shape.empty());
  CHECK(file.info("step").numel() == 1);
  CHECK(file.info("empty").shape == std::vector<std::int64_t>{0, 3});
  CHECK(file.info("empty").numel() == 0);
  CHECK(file.metadata() == std::map<std::string, std::string>{
                               {"format", "pt"}, {"note", "h\xc3\xa9llo \xe2\x86\x92 kformer"}});

  // Raw bytes, little-endian: 1.5f is 0x3FC00000, the F16 values 0x3C00, 0xC000, 0x7BFF, 0x0001.
  CHECK(file.bytes("u8") == hex_bytes({0x00, 0xFF, 0x07}));
  CHECK(file.bytes("f32").substr(4, 4) == hex_bytes({0x00, 0x00, 0xC0, 0x3F}));
  CHECK(file.bytes("f16") == hex_bytes({0x00, 0x3C, 0x00, 0xC0, 0xFF, 0x7B, 0x01, 0x00}));
  CHECK(file.bytes("empty").empty());

  const std::vector<float> f32 = file.to_float("f32");
  REQUIRE(f32.size() == 6);
  CHECK(f32[0] == 0.0f);
  CHECK(f32[1] == 1.5f);
  CHECK(f32[2] == -2.25f);
  CHECK(f32[3] == std::numeric_limits<float>::max());
  CHECK(f32[4] == std::numeric_limits<float>::denorm_min());
  CHECK(f32[5] == 0.0f);
  CHECK(std::signbit(f32[5]));

  CHECK(file.to_double("f64") ==
        std::vector<double>{1.0 / 3.0, -1e300, std::numeric_limits<double>::denorm_min()});
  CHECK(file.to_float("f16") == std::vector<float>{1.0f, -2.0f, 65504.0f, std::ldexp(1.0f, -24)});
  CHECK(file.to_float("bf16") == std::vector<float>{1.0f, -3.5f, std::ldexp(1.0f, 100), 0.15625f});
  CHECK(file.to_int64("i64") == std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(),
                                                          std::numeric_limits<std::int64_t>::max(),
                                                          0, -1});
  CHECK(file.to_double("i64")[1] == 9223372036854775808.0);  // 2^63 - 1 rounds up to 2^63
  CHECK(file.to_int64("i32") == std::vector<std::int64_t>{-2147483648LL, 2147483647LL, 0, -7});
  CHECK(file.to_int64("i8") == std::vector<std::int64_t>{-128, 127, 0, -1});
  CHECK(file.to_int64("u8") == std::vector<std::int64_t>{0, 255, 7});
  CHECK(file.to_double("u8") == std::vector<double>{0, 255, 7});
  CHECK(file.to_int64("flag") == std::vector<std::int64_t>{1, 0, 1});
  CHECK(file.to_float("flag") == std::vector<float>{1, 0, 1});
  CHECK(file.to_int64("step") == std::vector<std::int64_t>{42});
  CHECK(file.to_float("empty").empty());

  // The same image parsed from memory.
  const File parsed = File::parse(read_bytes(path), "golden");
  CHECK(parsed.tensors().size() == names.size());
  CHECK(parsed.bytes("bf16") == file.bytes("bf16"));
}

TEST_CASE("safetensors conversions refuse what does not fit", "[core][safetensors][errors]") {
  const File file = File::read(golden_path("safetensors_golden.safetensors"));
  CHECK_THROWS_WITH(file.to_float("f64"), ContainsText("tensor 'f64'") && ContainsText("-1e+300") &&
                                              ContainsText("outside float's range"));
  CHECK_THROWS_WITH(file.to_int64("f32"), ContainsText("tensor 'f32' has dtype F32") &&
                                              ContainsText("only integer and BOOL"));
  CHECK_THROWS_WITH(file.info("missing"), ContainsText("no tensor 'missing'") &&
                                              ContainsText("holds 11 tensors: 'u8', 'f64'"));
  CHECK_THROWS_AS(file.bytes("missing"), Error);

  Writer writer;
  writer.add<std::uint64_t>("big", {2}, {std::uint64_t(1) << 63, 5});
  const File big = File::parse(writer.serialize());
  CHECK_THROWS_WITH(big.to_int64("big"), ContainsText("U64 value 9223372036854775808") &&
                                             ContainsText("does not fit in int64"));
  CHECK(big.to_double("big") == std::vector<double>{9223372036854775808.0, 5.0});
}

TEST_CASE("safetensors Writer round-trips every dtype bit for bit", "[core][safetensors]") {
  const std::string f16_bytes = hex_bytes({0x00, 0x3C, 0x00, 0x7E, 0x00, 0x7C});  // 1, NaN, +inf
  const std::string bf16_bytes = hex_bytes({0x80, 0x3F, 0xC0, 0xFF});             // 1, NaN
  const std::vector<float> f32 = {1.0f,
                                  -0.0f,
                                  std::numeric_limits<float>::quiet_NaN(),
                                  std::numeric_limits<float>::infinity(),
                                  1e-40f,
                                  3.0f};
  const std::vector<double> f64 = {0.1, -1e308, std::numeric_limits<double>::denorm_min()};

  Writer writer;
  writer.add<std::uint8_t>("u8", {3}, {0, 128, 255});  // 1-byte types first: the writer reorders
  writer.add<bool>("bool", {2, 2}, {true, false, false, true});
  writer.add<std::int8_t>("i8", {2}, {-128, 127});
  writer.add<float>("f32", {2, 3}, f32);
  writer.add("f16", Dtype::F16, {3}, f16_bytes);
  writer.add("bf16", Dtype::BF16, {1, 2}, bf16_bytes);
  writer.add<double>("f64", {3}, f64);
  writer.add<std::int32_t>("i32", {1}, {-123456789});
  writer.add<std::int64_t>("i64", {}, {std::numeric_limits<std::int64_t>::min()});
  writer.add<std::uint16_t>("u16", {1}, {65535});
  writer.add<std::int16_t>("i16", {1}, {-2});
  writer.add<std::uint32_t>("u32", {1}, {4000000000u});
  writer.add<float>("none", {0}, {});
  writer.set_metadata("config", "{\"d_model\": 64}");
  writer.set_metadata("format", "pt");

  ScratchDir dir;
  const std::string path = dir.path + "/round.safetensors";
  dir.files.push_back(path);
  writer.write(path);
  const std::string bytes = read_bytes(path);
  CHECK(bytes == writer.serialize());  // the same tensors always give the same bytes

  const File file = File::read(path);
  CHECK(file.metadata().at("config") == "{\"d_model\": 64}");
  CHECK(file.metadata().at("format") == "pt");
  CHECK(file.tensors().size() == 13);
  // Element values survive bit for bit (compared as stored bytes, so NaN and -0 count too).
  const auto f32_bits = [&](const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  };
  CHECK(file.bytes("f32") == f32_bits(f32));
  CHECK(f32_bits(file.to_float("f32")) == f32_bits(f32));
  CHECK(file.to_double("f64") == f64);
  CHECK(file.bytes("f16") == f16_bytes);
  CHECK(file.bytes("bf16") == bf16_bytes);
  const std::vector<float> f16 = file.to_float("f16");
  CHECK(f16[0] == 1.0f);
  CHECK(std::isnan(f16[1]));
  CHECK(f16[2] == std::numeric_limits<float>::infinity());
  CHECK(file.info("bf16").shape == std::vector<std::int64_t>{1, 2});
  CHECK(file.to_int64("u8") == std::vector<std::int64_t>{0, 128, 255});
  CHECK(file.to_int64("bool") == std::vector<std::int64_t>{1, 0, 0, 1});
  CHECK(file.to_int64("i8") == std::vector<std::int64_t>{-128, 127});
  CHECK(file.to_int64("i32") == std::vector<std::int64_t>{-123456789});
  CHECK(file.info("i64").shape.empty());
  CHECK(file.to_int64("i64") ==
        std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min()});
  CHECK(file.to_int64("u16") == std::vector<std::int64_t>{65535});
  CHECK(file.to_int64("i16") == std::vector<std::int64_t>{-2});
  CHECK(file.to_int64("u32") == std::vector<std::int64_t>{4000000000LL});
  CHECK(file.info("none").numel() == 0);

  // Layout: the header is padded with spaces to a multiple of 8 bytes and every tensor starts at
  // a multiple of its element size.
  std::uint64_t header_length = 0;
  for (int b = 7; b >= 0; --b)
    header_length = (header_length << 8) | static_cast<unsigned char>(bytes[b]);
  CHECK(header_length % 8 == 0);
  CHECK(bytes[8 + header_length - 1] != '\0');
  for (const auto& t : file.tensors())
    CHECK(t.begin % dtype_size(t.dtype) == 0);

  // Reading and writing again reproduces the file.
  Writer again;
  for (const auto& t : file.tensors())
    again.add(t.name, t.dtype, t.shape, file.bytes(t.name));
  for (const auto& [key, value] : file.metadata())
    again.set_metadata(key, value);
  CHECK(again.serialize() == bytes);
}

TEST_CASE("safetensors Writer output matches the format byte for byte", "[core][safetensors]") {
  Writer writer;
  writer.add<float>("w", {2}, {1.0f, -2.0f});
  writer.add<std::int8_t>("b", {1}, {-1});
  writer.set_metadata("k", "v");
  // The header written out by hand: metadata first, tensors in data order (4-byte floats before
  // 1-byte integers), compact JSON, padded with spaces to a multiple of 8.
  std::string header =
      R"({"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"I8","shape":[1],"data_offsets":[8,9]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const std::string data = hex_bytes({0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0xC0, 0xFF});
  CHECK(writer.serialize() == image(header, data));
}

TEST_CASE("safetensors Writer refuses inconsistent tensors", "[core][safetensors][errors]") {
  Writer writer;
  writer.add<float>("a", {2}, {1, 2});
  CHECK_THROWS_WITH(writer.add<float>("a", {1}, {1}), ContainsText("'a' was added twice"));
  CHECK_THROWS_WITH(writer.add<float>("b", {2, 2}, {1, 2, 3}),
                    ContainsText("shape (2, 2) of F32 needs 16 bytes, given 12"));
  CHECK_THROWS_WITH(writer.add("c", Dtype::F16, {3}, "abcd"),
                    ContainsText("needs 6 bytes, given 4"));
  CHECK_THROWS_WITH(writer.add<float>("d", {-1}, {}), ContainsText("negative extent"));
  CHECK_THROWS_WITH(writer.add<float>("", {0}, {}), ContainsText("name is empty"));
  CHECK_THROWS_WITH(writer.add<float>("__metadata__", {0}, {}), ContainsText("reserved"));
  CHECK_THROWS_WITH(writer.add<float>("bad\xff", {0}, {}), ContainsText("not valid UTF-8"));
  CHECK_THROWS_WITH(writer.set_metadata("k", "\xc3"), ContainsText("not valid UTF-8"));
  ScratchDir dir;
  CHECK_THROWS_WITH(writer.write(dir.path + "/no/such/dir.safetensors"),
                    ContainsText("kformer::write_file_atomic"));
}

TEST_CASE("safetensors reader rejects corrupt files with a clear message",
          "[core][safetensors][errors]") {
  const std::string ok_tensor = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string eight(8, '\0');
  // Each case: the file image and what the message must say.
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"", {"0 bytes, too few for the 8-byte header length"}},
      {std::string(5, '\0'), {"5 bytes, too few"}},
      {image("{}", "", std::uint64_t(200) << 20), {"header length 209715200 exceeds the limit"}},
      {image(ok_tensor, eight, ok_tensor.size() + 100),
       {"header length " + std::to_string(ok_tensor.size() + 100) + " runs past the end"}},
      {image("", ""), {"does not start with '{'"}},
      {image("[1, 2]", ""), {"does not start with '{'"}},
      {image("{\"a\xff\":{}}", ""), {"not valid UTF-8 (byte 3 of the header)"}},
      {image("{\"\xed\xa0\x80\":{}}", ""), {"not valid UTF-8 (byte 2"}},  // a surrogate
      {image("{\"\xc0\xaf\":{}}", ""), {"not valid UTF-8 (byte 2"}},      // an overlong '/'
      {image(R"({"a":{"dtype":"F32",)", ""), {"not valid JSON"}},
      {image(R"({"a":1})", ""), {"tensor 'a': the entry is not an object"}},
      {image(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", eight.substr(0, 4)),
       {"tensor 'a': no \"dtype\" string"}},
      {image(R"({"a":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}})", "x"),
       {"tensor 'a': unknown dtype \"F8\"", "known: BOOL, U8"}},
      {image(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", eight.substr(0, 4)),
       {"tensor 'a': no \"shape\" array"}},
      {image(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", eight.substr(0, 4)),
       {"tensor 'a': shape [-1] holds something other than non-negative integers"}},
      {image(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", eight.substr(0, 4)),
       {"shape [1.5] holds something other"}},
      {image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", eight.substr(0, 4)),
       {"tensor 'a': no \"data_offsets\" pair"}},
      {image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", eight.substr(0, 4)),
       {"data_offsets [4, 0] end before they begin"}},
      {image(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", std::string(20, 'x')),
       {"tensor 'a': shape (2, 3) of F32 needs 24 bytes but data_offsets [0, 20] hold 20"}},
      {image(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})",
             eight),
       {"needs more than 2^63 bytes"}},
      {image(ok_tensor, eight.substr(0, 6)),
       {"tensor 'a': data_offsets [0, 8] run past the end of the data (6 bytes"}},
      {image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
             std::string(12, 'x')),
       {"tensor 'b' (bytes [4, 12)) overlaps tensor 'a' (bytes [0, 8))"}},
      {image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
             std::string(12, 'x')),
       {"data bytes [4, 8) belong to no tensor", "before tensor 'b'"}},
      {image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       {"data bytes [0, 4) belong to no tensor"}},
      {image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
       {"the last 4 of the 8 data bytes belong to no tensor"}},
      {image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
             R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
             eight),
       {"tensor 'a' appears twice"}},
      {image(R"({"a":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})",
             eight.substr(0, 4)),
       {"key 'dtype' appears twice"}},
      {image(R"({"__metadata__":[1]})", ""), {"__metadata__ is not an object of strings"}},
      {image(R"({"__metadata__":{"n":1}})", ""), {"__metadata__ entry 'n' is not a string"}},
  };
  ScratchDir dir;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& [bytes, expected] = cases[i];
    INFO("case " << i);
    const std::string path = dir.file("case" + std::to_string(i) + ".safetensors", bytes);
    for (const bool from_file : {true, false}) {
      std::string message;
      try {
        if (from_file)
          File::read(path);
        else
          File::parse(bytes, "image.safetensors");
      } catch (const Error& e) {
        message = e.what();
      }
      INFO(message);
      CHECK_THAT(message, ContainsText(from_file ? "kformer::safetensors::File::read: " + path
                                                 : std::string("kformer::safetensors::File::parse: "
                                                               "image.safetensors")));
      for (const auto& part : expected)
        CHECK_THAT(message, ContainsText(part));
    }
  }
}

TEST_CASE("safetensors reader reports unreadable paths", "[core][safetensors][errors]") {
  ScratchDir dir;
  CHECK_THROWS_WITH(File::read(dir.path + "/missing.safetensors"),
                    ContainsText("cannot read '" + dir.path + "/missing.safetensors'") &&
                        ContainsText("No such file"));
  CHECK_THROWS_WITH(File::read(dir.path), ContainsText("not a regular file"));
}

TEST_CASE("safetensors reader survives every truncation and random corruption",
          "[core][safetensors][errors]") {
  const std::string good = read_bytes(golden_path("safetensors_golden.safetensors"));
  // Every proper prefix is a truncated file: the data section can no longer be covered.
  for (std::size_t length = 0; length < good.size(); ++length) {
    INFO("length " << length);
    CHECK_THROWS_AS(File::parse(good.substr(0, length)), Error);
  }
  // Random byte changes anywhere: the reader either accepts the file, and then every tensor
  // converts without reading out of bounds, or throws kformer::Error (and nothing else).
  std::mt19937_64 gen(20240601);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = good;
    const int changes = 1 + static_cast<int>(gen() % 3);
    for (int c = 0; c < changes; ++c)
      bytes[gen() % bytes.size()] = static_cast<char>(gen() & 0xFF);
    try {
      const File file = File::parse(bytes);
      for (const auto& t : file.tensors()) {
        CHECK(file.bytes(t.name).size() == t.byte_size());
        CHECK(file.to_double(t.name).size() == static_cast<std::size_t>(t.numel()));
      }
      ++accepted;
    } catch (const Error&) {
    }
  }
  CHECK(accepted > 0);  // changes inside the data section leave a valid file
}

TEMPLATE_LIST_TEST_CASE("copy_to_view and load_tensor fill views in every memory space",
                        "[core][safetensors]", backends::EnabledSpaces) {
  using Memory = typename TestType::memory_space;
  Writer writer;
  writer.add<float>("w", {2, 3}, {1, 2, 3, 4, 5, 6});
  writer.add("h", Dtype::F16, {2}, hex_bytes({0x00, 0x3C, 0x00, 0xC0}));  // 1, -2
  writer.add<std::int64_t>("n", {}, {7});
  const File file = File::parse(writer.serialize(), "weights");

  Tensor2<float, Memory> w("w", 2, 3);
  load_tensor(file, "w", w);
  CHECK(testing::host_values(w) == std::vector<double>{1, 2, 3, 4, 5, 6});

  Kokkos::View<double*, Memory> h("h", 2);
  load_tensor(file, "h", h);
  CHECK(testing::host_values(h) == std::vector<double>{1, -2});

  Kokkos::View<std::int64_t, Memory> n("num_batches_tracked");
  load_tensor(file, "n", n);
  CHECK(testing::host_values(n) == std::vector<double>{7});

  Tensor3<float, Memory> x("x", 2, 2, 2);
  copy_to_view(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}, x);
  CHECK(testing::host_values(x) == std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7});

  Tensor2<float, Memory> wrong("wrong", 3, 2);
  CHECK_THROWS_WITH(load_tensor(file, "w", wrong),
                    ContainsText("weights: tensor 'w' has shape (2, 3), view 'wrong' has "
                                 "shape (3, 2)"));
  CHECK_THROWS_WITH(copy_to_view(std::vector<float>{1, 2, 3}, w, "pe"),
                    ContainsText("pe has 3 values but view 'w' of shape (2, 3) holds 6"));
  CHECK(testing::host_values(w) == std::vector<double>{1, 2, 3, 4, 5, 6});  // untouched
  Kokkos::View<std::int8_t*, Memory> small("small", 1);
  Writer big;
  big.add<std::int32_t>("v", {1}, {300});
  CHECK_THROWS_WITH(load_tensor(File::parse(big.serialize()), "v", small),
                    ContainsText("value 300 at element 0 does not fit"));
}
