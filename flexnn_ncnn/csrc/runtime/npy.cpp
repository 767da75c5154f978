#include "runtime/npy.h"

#include "runtime/tensor.h"
#include "runtime/text_file.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace flexnn {

namespace {

const char kMagic[] = "\x93NUMPY";

// value of `key` in the header dict, e.g. "'descr': '<f4'" -> "'<f4'"
std::string header_value(const std::string& header, const std::string& key)
{
    size_t k = header.find("'" + key + "'");
    if (k == std::string::npos)
        return "";
    size_t start = header.find(':', k) + 1;
    while (start < header.size() && header[start] == ' ')
        start++;
    size_t end = header[start] == '(' ? header.find(')', start) + 1 : header.find(',', start);
    return header.substr(start, end - start);
}

} // namespace

Status read_npy(const std::string& path, ncnn::Mat& out)
{
    File f(fopen(path.c_str(), "rb"));
    if (!f)
        return Status::error("cannot open " + path);
    unsigned char preamble[10];
    if (fread(preamble, 1, 10, f.get()) != 10 || memcmp(preamble, kMagic, 6) != 0)
        return Status::error(path + " is not a .npy file");
    size_t header_len = preamble[8] | (preamble[9] << 8);
    if (preamble[6] != 1)
    {
        unsigned char more[2];
        if (fread(more, 1, 2, f.get()) != 2)
            return Status::error(path + ": truncated header");
        header_len |= (size_t)more[0] << 16 | (size_t)more[1] << 24;
    }
    std::string header(header_len, '\0');
    if (fread(&header[0], 1, header_len, f.get()) != header_len)
        return Status::error(path + ": truncated header");
    if (header_value(header, "descr") != "'<f4'")
        return Status::error(path + ": only float32 (<f4) is supported, not " + header_value(header, "descr"));
    if (header_value(header, "fortran_order") != "False")
        return Status::error(path + ": only C order is supported");
    std::vector<int> shape;
    std::string dims = header_value(header, "shape");
    for (size_t i = 1; i < dims.size();)
    {
        size_t used = 0;
        if (dims[i] >= '0' && dims[i] <= '9')
        {
            shape.push_back(std::stoi(dims.substr(i), &used));
            i += used;
        }
        else
            i++;
    }
    size_t count = 1;
    for (int d : shape)
        count *= (size_t)d;
    std::vector<float> data(count);
    if (fread(data.data(), sizeof(float), count, f.get()) != count)
        return Status::error(path + ": truncated data");
    return mat_from_dense(shape, data.data(), out);
}

Status write_npy(const std::string& path, const ncnn::Mat& m)
{
    std::vector<int> shape;
    Status s = dense_shape(m, shape);
    if (!s.ok())
        return s;
    std::string dims = "(";
    size_t count = 1;
    for (size_t i = 0; i < shape.size(); i++)
    {
        dims += (i ? ", " : "") + std::to_string(shape[i]);
        count *= (size_t)shape[i];
    }
    dims += shape.size() == 1 ? ",)" : ")"; // numpy's tuple syntax
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + dims + ", }";
    // magic(6) + version(2) + len(2) + header + '\n' is a multiple of 64
    size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    std::vector<float> dense(count);
    copy_to_dense(m, dense.data());

    // written beside the target, then renamed over it: readers never see a partial file
    std::string tmp = path + ".tmp";
    {
        File f(fopen(tmp.c_str(), "wb"));
        if (!f)
            return Status::error("cannot write " + tmp);
        unsigned char preamble[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(header.size() & 0xff), (unsigned char)(header.size() >> 8)};
        bool ok = fwrite(preamble, 1, 10, f.get()) == 10
                  && fwrite(header.data(), 1, header.size(), f.get()) == header.size()
                  && fwrite(dense.data(), sizeof(float), count, f.get()) == count;
        if (!ok || fflush(f.get()) != 0)
            return Status::error("cannot write " + tmp);
    }
    if (rename(tmp.c_str(), path.c_str()) != 0)
        return Status::error("cannot rename " + tmp + " to " + path);
    return Status();
}

} // namespace flexnn
