// Reading files back in tests: a whole file as bytes, and a CSV (predictions.csv, log.csv) as rows
// of cells. One home for what several suites did each their own way.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace xylem::test {

// The file's bytes ("" when it cannot be read).
inline std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Each line split at commas (no quoting: xylem's CSVs have none); a trailing comma gives an empty
// last cell, as an empty field of the header's last column does.
inline std::vector<std::vector<std::string>> read_csv(const std::filesystem::path& path) {
    std::vector<std::vector<std::string>> rows;
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line)) {
        std::vector<std::string> cells;
        std::stringstream s(line);
        std::string cell;
        while (std::getline(s, cell, ',')) cells.push_back(cell);
        if (!line.empty() && line.back() == ',') cells.push_back("");
        rows.push_back(cells);
    }
    return rows;
}

}  // namespace xylem::test
