#ifndef FLEXNN_STATUS_H
#define FLEXNN_STATUS_H

#include <string>
#include <utility>

namespace flexnn {

// An operation's outcome: empty message on success, one readable line otherwise.
// one_line() is the message as Python and a terminal can take it: valid UTF-8, no control bytes
// (a message may quote a file's bytes), every other byte as \xNN.
class Status
{
public:
    Status() = default;
    static Status error(std::string message)
    {
        Status s;
        s.message_ = message.empty() ? "unknown error" : std::move(message);
        return s;
    }
    bool ok() const
    {
        return message_.empty();
    }
    const std::string& message() const
    {
        return message_;
    }
    std::string one_line() const
    {
        std::string out;
        const std::string& m = message_;
        for (size_t i = 0; i < m.size();)
        {
            const unsigned char c = (unsigned char)m[i];
            // the length of a well-formed UTF-8 sequence starting here (no overlong form, no
            // surrogate, nothing past U+10FFFF), 0 if none
            size_t n = c >= 0x20 && c < 0x7f ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
            for (size_t k = 1; k < n; k++)
            {
                const unsigned char d = i + k < m.size() ? (unsigned char)m[i + k] : 0;
                const unsigned char low = k > 1 ? 0x80 : c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
                const unsigned char high = k > 1 ? 0xbf : c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
                if (d < low || d > high)
                    n = 0;
            }
            if (n)
            {
                out.append(m, i, n);
                i += n;
                continue;
            }
            static const char hex[] = "0123456789abcdef";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
            i++;
        }
        return out;
    }

private:
    std::string message_;
};

} // namespace flexnn

#endif // FLEXNN_STATUS_H
