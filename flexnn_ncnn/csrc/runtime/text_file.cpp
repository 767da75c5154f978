#include "runtime/text_file.h"

namespace flexnn {

Status read_text_file(const std::string& path, std::string& text)
{
    text.clear();
    File f(fopen(path.c_str(), "rb"));
    if (!f)
        return Status::error("cannot read " + path);
    char buf[4096];
    size_t n = 0;
    while ((n = fread(buf, 1, sizeof(buf), f.get())) > 0)
        text.append(buf, n);
    if (ferror(f.get()))
        return Status::error("cannot read " + path);
    return Status();
}

} // namespace flexnn
