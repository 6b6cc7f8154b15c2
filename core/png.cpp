#include "png.hpp"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <string_view>

#include "error.hpp"
#include "file_io.hpp"

namespace kformer {
namespace {

void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<std::uint8_t>(v >> shift));
}

// A PNG chunk: length, type, data, CRC-32 over type and data.
void put_chunk(std::vector<std::uint8_t>& out, const char type[4],
               const std::vector<std::uint8_t>& data) {
  put_u32(out, static_cast<std::uint32_t>(data.size()));
  const std::size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  const uLong crc = crc32(0L, out.data() + start, static_cast<uInt>(out.size() - start));
  put_u32(out, static_cast<std::uint32_t>(crc));
}

}  // namespace

void write_png(const std::string& path, int width, int height,
               const std::vector<std::uint8_t>& rgb) {
  const std::string where = "kformer::write_png";
  if (width < 1 || height < 1) fail(where, "image size must be positive, got ", width, "x", height);
  const std::size_t row_bytes = std::size_t(width) * 3;
  if (rgb.size() != row_bytes * height)
    fail(where, "expected ", row_bytes * height, " bytes of RGB data, got ", rgb.size());

  // Every scanline starts with filter type 0 (none).
  std::vector<std::uint8_t> raw;
  raw.reserve((row_bytes + 1) * height);
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rgb.begin() + y * row_bytes, rgb.begin() + (y + 1) * row_bytes);
  }
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  std::vector<std::uint8_t> packed(packed_size);
  if (compress2(packed.data(), &packed_size, raw.data(), static_cast<uLong>(raw.size()), 6) != Z_OK)
    fail(where, "zlib compression failed");
  packed.resize(packed_size);

  std::vector<std::uint8_t> header;
  put_u32(header, static_cast<std::uint32_t>(width));
  put_u32(header, static_cast<std::uint32_t>(height));
  header.insert(header.end(),
                {8, 2, 0, 0, 0});  // 8-bit depth, RGB, deflate, filter 0, no interlace

  std::vector<std::uint8_t> file = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  put_chunk(file, "IHDR", header);
  put_chunk(file, "IDAT", packed);
  put_chunk(file, "IEND", {});

  write_file_atomic(path,
                    std::string_view(reinterpret_cast<const char*>(file.data()), file.size()));
}

void write_heatmap_png(const std::string& path, const std::vector<double>& values, int rows,
                       int cols, double lo, double hi, int cell_width, int cell_height) {
  const std::string where = "kformer::write_heatmap_png";
  if (rows < 1 || cols < 1) fail(where, "matrix must be non-empty, got ", rows, "x", cols);
  if (values.size() != std::size_t(rows) * cols)
    fail(where, "expected ", std::size_t(rows) * cols, " values, got ", values.size());
  if (cell_width < 1 || cell_height < 1) fail(where, "cell size must be positive");
  if (!(hi > lo)) fail(where, "colour range must satisfy lo < hi, got [", lo, ", ", hi, "]");

  const int width = cols * cell_width, height = rows * cell_height;
  std::vector<std::uint8_t> rgb(std::size_t(width) * height * 3);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      // Diverging map: t in [-1, 1], blue (-1) -> white (0) -> red (+1).
      const double t =
          std::clamp(2.0 * (values[std::size_t(r) * cols + c] - lo) / (hi - lo) - 1.0, -1.0, 1.0);
      const auto fade = [](double a) {
        return static_cast<std::uint8_t>(std::lround(255.0 * (1.0 - a)));
      };
      const std::uint8_t red = t < 0 ? fade(-t) : 255, blue = t > 0 ? fade(t) : 255;
      const std::uint8_t green = fade(std::abs(t));
      for (int dy = 0; dy < cell_height; ++dy) {
        std::uint8_t* px = &rgb[((std::size_t(r) * cell_height + dy) * width + c * cell_width) * 3];
        for (int dx = 0; dx < cell_width; ++dx, px += 3) {
          px[0] = red;
          px[1] = green;
          px[2] = blue;
        }
      }
    }
  }
  write_png(path, width, height, rgb);
}

}  // namespace kformer
