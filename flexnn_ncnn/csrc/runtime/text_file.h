#ifndef FLEXNN_TEXT_FILE_H
#define FLEXNN_TEXT_FILE_H

#include "runtime/status.h"

#include <cstdio>
#include <memory>
#include <string>

namespace flexnn {

// Files through C stdio, not iostreams: constructing a stream builds the C++ locale (every facet of
// the classic one): 0.33 MB of libstdc++'s code made resident in a process that never needs it,
// counted in the memory beside the arena (docs/RUNTIME.md).

struct FileCloser
{
    void operator()(FILE* f) const
    {
        fclose(f);
    }
};
using File = std::unique_ptr<FILE, FileCloser>;

// The whole content of `path`.
Status read_text_file(const std::string& path, std::string& text);

} // namespace flexnn

#endif // FLEXNN_TEXT_FILE_H
