#pragma once

#include <filesystem>
#include <vector>

namespace oomb {

// The regular files under dir, recursively, in path order; hidden files and hidden directories aside.
std::vector<std::filesystem::path> visible_files(const std::filesystem::path& dir);

}  // namespace oomb
