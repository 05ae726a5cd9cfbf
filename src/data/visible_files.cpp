#include "data/visible_files.h"

#include <algorithm>

#include "core/error.h"

namespace oomb {

namespace fs = std::filesystem;

std::vector<fs::path> visible_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; it != end; it.increment(ec)) {
    OOMB_CHECK(!ec, "{}: cannot list: {}", dir.string(), ec.message());
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace oomb
