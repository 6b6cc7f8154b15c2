// Fuzz target: the safetensors reader (core/safetensors.cpp) on arbitrary bytes. Bad input must
// be refused with a kformer::Error; a file that parses must hand out every tensor's bytes and
// conversions without reading out of bounds, and what the Writer accepts from it must read back
// the same.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <kformer/core/error.hpp>
#include <kformer/core/safetensors.hpp>

#include "fuzz_support.hpp"

namespace {

using kformer::safetensors::File;
using kformer::safetensors::TensorInfo;

constexpr const char* target = "fuzz_safetensors";

// Reads every tensor every way; the conversions may refuse values (F64 beyond float's range, U64
// beyond int64's, floats as int64) with a kformer::Error.
void read_everything(const File& file) {
  for (const TensorInfo& t : file.tensors()) {
    const std::string_view bytes = file.bytes(t.name);
    const std::uint64_t numel = static_cast<std::uint64_t>(t.numel());
    if (bytes.size() != t.byte_size() || numel * dtype_size(t.dtype) != t.byte_size())
      kformer::fuzz::finding(target, "tensor '" + t.name + "': sizes disagree");
    if (file.to_double(t.name).size() != numel)
      kformer::fuzz::finding(target, "tensor '" + t.name + "': to_double has the wrong size");
    try {
      if (file.to_float(t.name).size() != numel)
        kformer::fuzz::finding(target, "tensor '" + t.name + "': to_float has the wrong size");
    } catch (const kformer::Error&) {
    }
    try {
      if (file.to_int64(t.name).size() != numel)
        kformer::fuzz::finding(target, "tensor '" + t.name + "': to_int64 has the wrong size");
    } catch (const kformer::Error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::optional<File> file;
  try {
    file.emplace(File::parse(bytes, "fuzz.safetensors"));
  } catch (const kformer::Error&) {
    return 0;
  }
  // From here on, a kformer::Error that escapes is a finding too (an uncaught exception).
  read_everything(*file);

  // The Writer may refuse names that the reader accepts (an empty one); what it takes must read
  // back the same.
  kformer::safetensors::Writer writer;
  try {
    for (const TensorInfo& t : file->tensors())
      writer.add(t.name, t.dtype, t.shape, file->bytes(t.name));
    for (const auto& [key, value] : file->metadata())
      writer.set_metadata(key, value);
  } catch (const kformer::Error&) {
    return 0;
  }
  const std::string image = writer.serialize();
  std::optional<File> again;
  try {
    again.emplace(File::parse(image, "written.safetensors"));
  } catch (const kformer::Error& e) {
    kformer::fuzz::finding(target, std::string("the Writer wrote what parse refuses: ") + e.what());
  }
  bool same =
      again->tensors().size() == file->tensors().size() && again->metadata() == file->metadata();
  for (const TensorInfo& t : file->tensors())
    same = same && again->contains(t.name) && again->info(t.name).dtype == t.dtype &&
           again->info(t.name).shape == t.shape && again->bytes(t.name) == file->bytes(t.name);
  if (!same) kformer::fuzz::finding(target, "the Writer then parse changed the file");
  return 0;
}
