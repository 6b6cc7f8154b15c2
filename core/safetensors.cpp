#include "safetensors.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "error.hpp"
#include "file_io.hpp"

namespace kformer::safetensors {
namespace {

struct DtypeEntry {
  Dtype dtype;
  const char* name;
  std::size_t size;
};

constexpr DtypeEntry dtype_table[] = {
    {Dtype::BOOL, "BOOL", 1}, {Dtype::U8, "U8", 1},     {Dtype::I8, "I8", 1},
    {Dtype::U16, "U16", 2},   {Dtype::I16, "I16", 2},   {Dtype::U32, "U32", 4},
    {Dtype::I32, "I32", 4},   {Dtype::U64, "U64", 8},   {Dtype::I64, "I64", 8},
    {Dtype::F16, "F16", 2},   {Dtype::BF16, "BF16", 2}, {Dtype::F32, "F32", 4},
    {Dtype::F64, "F64", 8}};

const DtypeEntry& entry_of(Dtype dtype) {
  for (const auto& entry : dtype_table)
    if (entry.dtype == dtype) return entry;
  fail("kformer::safetensors", "unknown Dtype value ", static_cast<int>(dtype));
}

std::string known_dtypes() {
  std::string names;
  for (const auto& entry : dtype_table) {
    if (!names.empty()) names += ", ";
    names += entry.name;
  }
  return names;
}

// Byte offset of the first byte that is not part of well-formed UTF-8 (no overlong forms, no
// surrogates, nothing above U+10FFFF), or npos when all of `text` is UTF-8.
std::size_t invalid_utf8_at(std::string_view text) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  std::size_t i = 0;
  while (i < text.size()) {
    const unsigned char lead = byte(i);
    std::size_t length;
    std::uint32_t code;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2;
      code = lead & 0x1Fu;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      code = lead & 0x0Fu;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      code = lead & 0x07u;
    } else {
      return i;
    }
    if (text.size() - i < length) return i;
    for (std::size_t k = 1; k < length; ++k) {
      if ((byte(i + k) & 0xC0) != 0x80) return i;
      code = (code << 6) | (byte(i + k) & 0x3Fu);
    }
    const std::uint32_t smallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < smallest[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return i;
    i += length;
  }
  return std::string_view::npos;
}

// Little-endian loads and stores, whatever the host's byte order.
template <class UInt>
UInt load_le(const unsigned char* p) {
  std::uint64_t v = 0;
  for (std::size_t b = 0; b < sizeof(UInt); ++b)
    v |= std::uint64_t(p[b]) << (8 * b);
  return static_cast<UInt>(v);
}

template <class T, class UInt>
T load_bits(const unsigned char* p) {
  static_assert(sizeof(T) == sizeof(UInt));
  const UInt bits = load_le<UInt>(p);
  T value;
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

float float_from_bits(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// IEEE binary16 -> binary32, exactly (every half is a float).
float half_to_float(std::uint16_t half) {
  const std::uint32_t sign = std::uint32_t(half & 0x8000u) << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1Fu;
  const std::uint32_t mantissa = half & 0x3FFu;
  if (exponent == 0x1F) return float_from_bits(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0)
    return float_from_bits(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in float.
  const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  return sign ? -magnitude : magnitude;
}

// bfloat16 is the upper half of a binary32.
float bfloat16_to_float(std::uint16_t bits) {
  return float_from_bits(std::uint32_t(bits) << 16);
}

// Calls visit(i, value) for every element, value in the dtype's natural C++ type (BOOL as 0/1
// std::uint8_t, F16 and BF16 as float).
template <class Visitor>
void visit_elements(Dtype dtype, const unsigned char* p, std::int64_t n, Visitor&& visit) {
  const std::size_t size = dtype_size(dtype);
  for (std::int64_t i = 0; i < n; ++i, p += size) {
    switch (dtype) {
      case Dtype::BOOL:
        visit(i, std::uint8_t(*p != 0));
        break;
      case Dtype::U8:
        visit(i, *p);
        break;
      case Dtype::I8:
        visit(i, load_bits<std::int8_t, std::uint8_t>(p));
        break;
      case Dtype::U16:
        visit(i, load_le<std::uint16_t>(p));
        break;
      case Dtype::I16:
        visit(i, load_bits<std::int16_t, std::uint16_t>(p));
        break;
      case Dtype::U32:
        visit(i, load_le<std::uint32_t>(p));
        break;
      case Dtype::I32:
        visit(i, load_bits<std::int32_t, std::uint32_t>(p));
        break;
      case Dtype::U64:
        visit(i, load_le<std::uint64_t>(p));
        break;
      case Dtype::I64:
        visit(i, load_bits<std::int64_t, std::uint64_t>(p));
        break;
      case Dtype::F16:
        visit(i, half_to_float(load_le<std::uint16_t>(p)));
        break;
      case Dtype::BF16:
        visit(i, bfloat16_to_float(load_le<std::uint16_t>(p)));
        break;
      case Dtype::F32:
        visit(i, load_bits<float, std::uint32_t>(p));
        break;
      case Dtype::F64:
        visit(i, load_bits<double, std::uint64_t>(p));
        break;
    }
  }
}

bool is_float(Dtype dtype) {
  return dtype == Dtype::F16 || dtype == Dtype::BF16 || dtype == Dtype::F32 || dtype == Dtype::F64;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << shape[i];
  os << ')';
  return os.str();
}

// numel for non-negative extents, or -1 when the product exceeds what a byte count can hold.
std::int64_t checked_numel(const std::vector<std::int64_t>& shape, std::size_t element_size) {
  const std::int64_t limit =
      std::numeric_limits<std::int64_t>::max() / static_cast<std::int64_t>(element_size);
  std::int64_t n = 1;
  for (const std::int64_t extent : shape) {
    if (extent != 0 && n > limit / extent) return -1;
    n *= extent;
  }
  return n;
}

// "24", or "more than 2^63" when numel is -1 (see checked_numel).
std::string needed_bytes(std::int64_t numel, std::size_t element_size) {
  return numel < 0 ? std::string("more than 2^63")
                   : std::to_string(std::uint64_t(numel) * element_size);
}

constexpr std::size_t header_length_bytes = 8;

// Checks the 8-byte header length against the file size; returns it.
std::uint64_t checked_header_length(const unsigned char prefix[8], std::uint64_t file_size,
                                    const std::string& where, const std::string& source) {
  const std::uint64_t length = load_le<std::uint64_t>(prefix);
  if (length > max_header_bytes)
    fail(where, source, ": header length ", length, " exceeds the limit of ", max_header_bytes,
         " bytes (not a safetensors file, or a corrupt one)");
  if (length > file_size - header_length_bytes)
    fail(where, source, ": header length ", length, " runs past the end of the file (", file_size,
         " bytes; truncated?)");
  return length;
}

void check_long_enough(std::uint64_t file_size, const std::string& where,
                       const std::string& source) {
  if (file_size < header_length_bytes)
    fail(where, source, ": the file has ", file_size,
         " bytes, too few for the 8-byte header length (truncated?)");
}

}  // namespace

std::size_t dtype_size(Dtype dtype) {
  return entry_of(dtype).size;
}

const char* dtype_name(Dtype dtype) {
  return entry_of(dtype).name;
}

bool parse_dtype(std::string_view name, Dtype& dtype) {
  for (const auto& entry : dtype_table) {
    if (name == entry.name) {
      dtype = entry.dtype;
      return true;
    }
  }
  return false;
}

std::int64_t TensorInfo::numel() const {
  std::int64_t n = 1;
  for (const std::int64_t extent : shape)
    n *= extent;
  return n;
}

// --- reading ------------------------------------------------------------------------------------

namespace {

// The header as JSON: refused when it is not UTF-8 JSON or repeats a key in one object
// (nlohmann keeps the last of duplicate keys silently; the parser's callback notes them).
nlohmann::json parse_header_json(std::string_view header, const std::string& source,
                                 const std::string& where) {
  using json = nlohmann::json;
  if (header.empty() || header.front() != '{')
    fail(where, source, ": the header does not start with '{' (not a safetensors file?)");
  if (const std::size_t at = invalid_utf8_at(header); at != std::string_view::npos)
    fail(where, source, ": the header is not valid UTF-8 (byte ", at, " of the header)");
  std::vector<std::set<std::string>> open_objects;  // the keys seen in each open object
  std::string duplicate;
  bool duplicate_is_tensor = false;
  const json::parser_callback_t note_duplicates = [&](int, json::parse_event_t event,
                                                      json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == json::parse_event_t::key && duplicate.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second) {
        duplicate = key;
        duplicate_is_tensor = open_objects.size() == 1;
      }
    }
    return true;
  };
  json root;
  try {
    root = json::parse(header.begin(), header.end(), note_duplicates);
  } catch (const json::exception& e) {
    fail(where, source, ": the header is not valid JSON: ", e.what());
  }
  if (!duplicate.empty()) {
    if (duplicate_is_tensor) fail(where, source, ": tensor '", duplicate, "' appears twice");
    fail(where, source, ": key '", duplicate, "' appears twice in one object of the header");
  }
  if (!root.is_object()) fail(where, source, ": the header is not a JSON object");
  return root;
}

// __metadata__: an object of strings.
std::map<std::string, std::string> parse_metadata(const nlohmann::json& entry,
                                                  const std::string& source,
                                                  const std::string& where) {
  if (!entry.is_object()) fail(where, source, ": __metadata__ is not an object of strings");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : entry.items()) {
    if (!value.is_string()) fail(where, source, ": __metadata__ entry '", key, "' is not a string");
    metadata.emplace(key, value.get<std::string>());
  }
  return metadata;
}

// One tensor's entry: its dtype, shape and data offsets, consistent with each other and inside
// the data section of data_size bytes.
TensorInfo parse_tensor_entry(const std::string& name, const nlohmann::json& entry,
                              std::uint64_t data_size, const std::string& source,
                              const std::string& where) {
  using json = nlohmann::json;
  const auto bad = [&](const auto&... parts) {
    fail(where, source, ": tensor '", name, "': ", parts...);
  };
  const auto as_offset = [](const json& value, std::uint64_t& out) {
    if (!value.is_number_unsigned()) return false;
    out = value.get<std::uint64_t>();
    return true;
  };
  if (!entry.is_object()) bad("the entry is not an object");
  TensorInfo info;
  info.name = name;
  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) bad("no \"dtype\" string");
  const auto& dtype = dtype_it->get_ref<const std::string&>();
  if (!parse_dtype(dtype, info.dtype))
    bad("unknown dtype \"", dtype, "\" (known: ", known_dtypes(), ")");
  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) bad("no \"shape\" array");
  for (const auto& extent : *shape_it) {
    std::uint64_t value;
    if (!as_offset(extent, value) ||
        value > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
      bad("shape ", shape_it->dump(), " holds something other than non-negative integers");
    info.shape.push_back(static_cast<std::int64_t>(value));
  }
  const auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !as_offset((*offsets_it)[0], info.begin) || !as_offset((*offsets_it)[1], info.end))
    bad("no \"data_offsets\" pair of non-negative integers");
  if (info.begin > info.end)
    bad("data_offsets [", info.begin, ", ", info.end, "] end before they begin");
  if (info.end > data_size)
    bad("data_offsets [", info.begin, ", ", info.end, "] run past the end of the data (", data_size,
        " bytes; the file is truncated or the offsets are wrong)");
  const std::int64_t numel = checked_numel(info.shape, dtype_size(info.dtype));
  if (numel < 0 || std::uint64_t(numel) * dtype_size(info.dtype) != info.byte_size())
    bad("shape ", shape_text(info.shape), " of ", dtype, " needs ",
        needed_bytes(numel, dtype_size(info.dtype)), " bytes but data_offsets [", info.begin, ", ",
        info.end, "] hold ", info.byte_size());
  return info;
}

// The tensors sorted by offset must cover the data section exactly: back to back, no overlaps, no
// holes, no bytes after the last one.
void check_coverage(std::vector<TensorInfo>& tensors, std::uint64_t data_size,
                    const std::string& source, const std::string& where) {
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::uint64_t covered = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (t.begin < covered)
      fail(where, source, ": tensor '", t.name, "' (bytes [", t.begin, ", ", t.end,
           ")) overlaps tensor '", tensors[i - 1].name, "' (bytes [", tensors[i - 1].begin, ", ",
           tensors[i - 1].end, "))");
    if (t.begin > covered)
      fail(where, source, ": data bytes [", covered, ", ", t.begin,
           ") belong to no tensor (the format allows no gaps before tensor '", t.name, "')");
    covered = t.end;
  }
  if (covered != data_size)
    fail(where, source, ": the last ", data_size - covered, " of the ", data_size,
         " data bytes belong to no tensor");
}

}  // namespace

File File::from_header(std::string_view header, std::uint64_t data_size, std::string source,
                       const std::string& where) {
  const nlohmann::json root = parse_header_json(header, source, where);
  File file;
  file.source_ = std::move(source);
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__")
      file.metadata_ = parse_metadata(entry, file.source_, where);
    else
      file.tensors_.push_back(parse_tensor_entry(name, entry, data_size, file.source_, where));
  }
  check_coverage(file.tensors_, data_size, file.source_, where);
  for (std::size_t i = 0; i < file.tensors_.size(); ++i)
    file.index_.emplace(file.tensors_[i].name, i);
  file.data_size_ = data_size;
  file.data_.reset(new unsigned char[std::max<std::uint64_t>(data_size, 1)]);
  return file;
}

File File::read(const std::string& path) {
  const std::string where = "kformer::safetensors::File::read";
  require_regular_file(path, where);  // before fopen, which waits forever on a FIFO
  std::FILE* stream = std::fopen(path.c_str(), "rb");
  if (!stream) fail(where, "cannot open '", path, "': ", std::strerror(errno));
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(stream, &std::fclose);
  struct stat status;
  if (fstat(fileno(stream), &status) != 0)
    fail(where, "cannot inspect '", path, "': ", std::strerror(errno));
  if (!S_ISREG(status.st_mode)) fail(where, path, ": not a regular file");
  const auto file_size = static_cast<std::uint64_t>(status.st_size);
  const auto read_exactly = [&](void* into, std::uint64_t count, const char* what) {
    if (count > 0 && std::fread(into, 1, count, stream) != count)
      fail(where, path, ": could not read the ", what, " (", count,
           " bytes): the file is shorter than it was a moment ago, or unreadable");
  };

  check_long_enough(file_size, where, path);
  unsigned char prefix[header_length_bytes];
  read_exactly(prefix, header_length_bytes, "header length");
  const std::uint64_t header_length = checked_header_length(prefix, file_size, where, path);
  std::string header(header_length, '\0');
  read_exactly(header.data(), header_length, "header");
  File file = from_header(header, file_size - header_length_bytes - header_length, path, where);
  read_exactly(file.data_.get(), file.data_size_, "tensor data");
  return file;
}

File File::parse(std::string_view bytes, const std::string& source) {
  const std::string where = "kformer::safetensors::File::parse";
  check_long_enough(bytes.size(), where, source);
  const auto* prefix = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::uint64_t header_length = checked_header_length(prefix, bytes.size(), where, source);
  const std::string_view header = bytes.substr(header_length_bytes, header_length);
  const std::uint64_t data_start = header_length_bytes + header_length;
  File file = from_header(header, bytes.size() - data_start, source, where);
  if (file.data_size_ > 0)
    std::memcpy(file.data_.get(), bytes.data() + data_start, file.data_size_);
  return file;
}

bool File::contains(std::string_view name) const {
  return index_.find(name) != index_.end();
}

const TensorInfo& File::info(std::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) {
    std::ostringstream names;
    std::size_t listed = 0;
    for (const auto& t : tensors_) {
      if (listed == 8) {
        names << ", ...";
        break;
      }
      names << (listed++ ? ", " : "") << '\'' << t.name << '\'';
    }
    fail("kformer::safetensors::File::info", source_, ": no tensor '", name, "' (the file holds ",
         tensors_.size(), " tensors: ", names.str(), ")");
  }
  return tensors_[it->second];
}

std::string_view File::bytes(std::string_view name) const {
  const TensorInfo& t = info(name);
  return {reinterpret_cast<const char*>(data_.get()) + t.begin,
          static_cast<std::size_t>(t.byte_size())};
}

std::vector<float> File::to_float(std::string_view name) const {
  const TensorInfo& t = info(name);
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  visit_elements(t.dtype, data_.get() + t.begin, t.numel(), [&](std::int64_t i, auto value) {
    if constexpr (std::is_same_v<decltype(value), double>) {
      const bool representable =
          !std::isfinite(value) || std::abs(value) <= double(std::numeric_limits<float>::max());
      if (!representable)
        fail("kformer::safetensors::File::to_float", source_, ": tensor '", t.name, "': F64 value ",
             value, " at element ", i, " is outside float's range");
    }
    out[static_cast<std::size_t>(i)] = static_cast<float>(value);
  });
  return out;
}

std::vector<double> File::to_double(std::string_view name) const {
  const TensorInfo& t = info(name);
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  visit_elements(t.dtype, data_.get() + t.begin, t.numel(), [&](std::int64_t i, auto value) {
    out[static_cast<std::size_t>(i)] = static_cast<double>(value);
  });
  return out;
}

std::vector<std::int64_t> File::to_int64(std::string_view name) const {
  const TensorInfo& t = info(name);
  const std::string where = "kformer::safetensors::File::to_int64";
  if (is_float(t.dtype))
    fail(where, source_, ": tensor '", t.name, "' has dtype ", dtype_name(t.dtype),
         "; only integer and BOOL tensors convert to int64");
  std::vector<std::int64_t> out(static_cast<std::size_t>(t.numel()));
  visit_elements(t.dtype, data_.get() + t.begin, t.numel(), [&](std::int64_t i, auto value) {
    if constexpr (std::is_same_v<decltype(value), std::uint64_t>) {
      if (value > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
        fail(where, source_, ": tensor '", t.name, "': U64 value ", value, " at element ", i,
             " does not fit in int64");
    }
    // I8 elements are int8_t, signed by the format: sign extension is the conversion wanted.
    out[static_cast<std::size_t>(i)] =
        static_cast<std::int64_t>(value);  // NOLINT(bugprone-signed-char-misuse)
  });
  return out;
}

// --- writing ------------------------------------------------------------------------------------

void Writer::add_entry(Entry entry) {
  const std::string where = "kformer::safetensors::Writer::add";
  if (entry.name.empty()) fail(where, "a tensor name is empty");
  if (entry.name == "__metadata__") fail(where, "the name __metadata__ is reserved for metadata");
  if (invalid_utf8_at(entry.name) != std::string_view::npos)
    fail(where, "tensor name '", entry.name, "' is not valid UTF-8");
  for (const auto& other : entries_)
    if (other.name == entry.name) fail(where, "tensor '", entry.name, "' was added twice");
  for (const std::int64_t extent : entry.shape)
    if (extent < 0)
      fail(where, "tensor '", entry.name, "': shape ", shape_text(entry.shape),
           " has a negative extent");
  const std::int64_t numel = checked_numel(entry.shape, dtype_size(entry.dtype));
  if (numel < 0 || std::uint64_t(numel) * dtype_size(entry.dtype) != entry.bytes.size())
    fail(where, "tensor '", entry.name, "': shape ", shape_text(entry.shape), " of ",
         dtype_name(entry.dtype), " needs ", needed_bytes(numel, dtype_size(entry.dtype)),
         " bytes, given ", entry.bytes.size());
  entries_.push_back(std::move(entry));
}

void Writer::add(const std::string& name, Dtype dtype, const std::vector<std::int64_t>& shape,
                 std::string_view bytes) {
  add_entry(Entry{name, dtype, shape, std::string(bytes)});
}

void Writer::set_metadata(const std::string& key, const std::string& value) {
  if (invalid_utf8_at(key) != std::string_view::npos ||
      invalid_utf8_at(value) != std::string_view::npos)
    fail("kformer::safetensors::Writer::set_metadata", "metadata '", key, "' is not valid UTF-8");
  metadata_[key] = value;
}

std::string Writer::serialize() const {
  std::vector<const Entry*> order;
  for (const auto& entry : entries_)
    order.push_back(&entry);
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return dtype_size(a->dtype) > dtype_size(b->dtype);
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::uint64_t offset = 0;
  for (const Entry* entry : order) {
    header[entry->name] = {{"dtype", dtype_name(entry->dtype)},
                           {"shape", entry->shape},
                           {"data_offsets", {offset, offset + entry->bytes.size()}}};
    offset += entry->bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(header_length_bytes + text.size() + offset);
  for (std::size_t b = 0; b < header_length_bytes; ++b)
    out.push_back(static_cast<char>((std::uint64_t(text.size()) >> (8 * b)) & 0xFF));
  out += text;
  for (const Entry* entry : order)
    out += entry->bytes;
  return out;
}

void Writer::write(const std::string& path) const {
  write_file_atomic(path, serialize());
}

}  // namespace kformer::safetensors
