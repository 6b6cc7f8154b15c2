// safetensors files (https://github.com/huggingface/safetensors): read, inspect, convert, write.
//
// Layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON mapping each tensor name
// to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data section) plus
// an optional "__metadata__" map of strings, then the data section: every tensor's bytes in
// row-major order, little-endian, packed with no gaps.
//
// The reader checks the whole header against the file before it hands anything out, so a corrupt
// or hostile file gives a kformer::Error naming the file, the tensor and the problem and never a
// read out of bounds. This header does not include Kokkos; safetensors_kokkos.hpp copies tensors
// into Views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace kformer::safetensors {

enum class Dtype { BOOL, U8, I8, U16, I16, U32, I32, U64, I64, F16, BF16, F32, F64 };

// Bytes per element.
std::size_t dtype_size(Dtype dtype);
// The name the format uses: "F32", "BF16", "BOOL", ...
const char* dtype_name(Dtype dtype);
// The dtype called `name`, or false when the name is not one of the above.
bool parse_dtype(std::string_view name, Dtype& dtype);

// The dtype that holds a C++ arithmetic type (bool, the fixed-width integers, float, double).
template <class T>
constexpr Dtype dtype_of() {
  static_assert(std::is_arithmetic_v<T>, "dtype_of<T>: T must be an arithmetic type");
  if constexpr (std::is_same_v<T, bool>) {
    return Dtype::BOOL;
  } else if constexpr (std::is_floating_point_v<T>) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "dtype_of<T>: float or double only");
    return sizeof(T) == 4 ? Dtype::F32 : Dtype::F64;
  } else if constexpr (std::is_signed_v<T>) {
    return sizeof(T) == 1   ? Dtype::I8
           : sizeof(T) == 2 ? Dtype::I16
           : sizeof(T) == 4 ? Dtype::I32
                            : Dtype::I64;
  } else {
    return sizeof(T) == 1   ? Dtype::U8
           : sizeof(T) == 2 ? Dtype::U16
           : sizeof(T) == 4 ? Dtype::U32
                            : Dtype::U64;
  }
}

// Headers larger than this are refused before anything is allocated for them (the reference
// implementation's limit is 100 MB; a header that size describes millions of tensors).
inline constexpr std::uint64_t max_header_bytes = std::uint64_t(100) << 20;

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::int64_t> shape;   // empty for a scalar
  std::uint64_t begin = 0, end = 0;  // byte range within the data section

  std::int64_t numel() const;
  std::uint64_t byte_size() const { return end - begin; }
};

// A safetensors file read into memory: the validated header and the data section in one host
// buffer. Move-only (the buffer can be large).
class File {
 public:
  // Reads and validates `path`. Throws kformer::Error naming the path and the problem.
  static File read(const std::string& path);
  // The same checks on a file image already in memory; `source` names it in messages.
  static File parse(std::string_view bytes, const std::string& source = "<memory>");

  const std::string& source() const { return source_; }
  // Every tensor, in the order of its data in the file.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  bool contains(std::string_view name) const;
  // Throws kformer::Error when there is no tensor called `name`.
  const TensorInfo& info(std::string_view name) const;
  // The tensor's bytes as stored: row-major, little-endian.
  std::string_view bytes(std::string_view name) const;

  // Element-wise conversions, row-major. to_float and to_double accept every dtype (BOOL reads
  // as 0/1; 64-bit integers above 2^53 round); to_float refuses F64 values outside float's range.
  // to_int64 accepts the integer dtypes and BOOL and refuses U64 values above INT64_MAX.
  std::vector<float> to_float(std::string_view name) const;
  std::vector<double> to_double(std::string_view name) const;
  std::vector<std::int64_t> to_int64(std::string_view name) const;

 private:
  File() = default;
  // Validates the header against a data section of data_size bytes and allocates the buffer.
  static File from_header(std::string_view header, std::uint64_t data_size, std::string source,
                          const std::string& where);

  std::string source_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
  std::unique_ptr<unsigned char[]> data_;
  std::uint64_t data_size_ = 0;
};

// Collects tensors and metadata and writes them as one safetensors file.
//
// Tensors are laid out by decreasing element size (insertion order within a size), so that every
// tensor starts at a multiple of its element size: the format allows no gaps between tensors, and
// readers that map the file (numpy, PyTorch) then see aligned data. The header is padded with
// spaces to a multiple of 8 bytes for the same reason. The same tensors and metadata always give
// the same bytes.
class Writer {
 public:
  // Adds a tensor from its stored bytes (row-major, little-endian); the bytes are copied. Throws
  // kformer::Error for a duplicate, empty, reserved or non-UTF-8 name, a negative extent, or a
  // byte count that is not numel * dtype_size.
  void add(const std::string& name, Dtype dtype, const std::vector<std::int64_t>& shape,
           std::string_view bytes);
  // Adds a tensor of host values (float, double, bool or a fixed-width integer type).
  template <class T>
  void add(const std::string& name, const std::vector<std::int64_t>& shape,
           const std::vector<T>& values);
  void set_metadata(const std::string& key, const std::string& value);

  // The complete file image.
  std::string serialize() const;
  // serialize(), written with write_file_atomic.
  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string name;
    Dtype dtype;
    std::vector<std::int64_t> shape;
    std::string bytes;
  };
  void add_entry(Entry entry);

  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

namespace detail {
template <std::size_t Size>
struct unsigned_of_size;
template <>
struct unsigned_of_size<1> {
  using type = std::uint8_t;
};
template <>
struct unsigned_of_size<2> {
  using type = std::uint16_t;
};
template <>
struct unsigned_of_size<4> {
  using type = std::uint32_t;
};
template <>
struct unsigned_of_size<8> {
  using type = std::uint64_t;
};

// The values' bytes in little-endian order, whatever the host's byte order.
template <class T>
std::string little_endian_bytes(const std::vector<T>& values) {
  using Bits = typename unsigned_of_size<sizeof(T)>::type;
  std::string bytes;
  bytes.reserve(values.size() * sizeof(T));
  for (const T& value : values) {
    Bits bits;
    std::memcpy(&bits, &value, sizeof(T));
    for (std::size_t b = 0; b < sizeof(T); ++b)
      bytes.push_back(static_cast<char>((std::uint64_t(bits) >> (8 * b)) & 0xFF));
  }
  return bytes;
}
}  // namespace detail

template <class T>
void Writer::add(const std::string& name, const std::vector<std::int64_t>& shape,
                 const std::vector<T>& values) {
  constexpr Dtype dtype = dtype_of<T>();
  Entry entry{name, dtype, shape, {}};
  if constexpr (std::is_same_v<T, bool>) {
    // std::vector<bool> has no data(); BOOL is one byte per element, 0 or 1.
    entry.bytes.reserve(values.size());
    for (const bool v : values)
      entry.bytes.push_back(v ? '\1' : '\0');
  } else {
    entry.bytes = detail::little_endian_bytes(values);
  }
  add_entry(std::move(entry));
}

}  // namespace kformer::safetensors
