// Minimal PNG output for looking at matrices (the encoding program's heatmaps).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kformer {

// Writes an 8-bit RGB image, rgb holding width*height*3 bytes row by row. Throws kformer::Error
// when the file cannot be written.
void write_png(const std::string& path, int width, int height,
               const std::vector<std::uint8_t>& rgb);

// A row-major (rows, cols) matrix as a heatmap: value lo is blue, (lo+hi)/2 white, hi red; each
// entry becomes a cell of cell_width x cell_height pixels.
void write_heatmap_png(const std::string& path, const std::vector<double>& values, int rows,
                       int cols, double lo, double hi, int cell_width = 1, int cell_height = 1);

}  // namespace kformer
