#ifndef FLEXNN_STATUS_H
#define FLEXNN_STATUS_H

#include <string>
#include <utility>

namespace flexnn {

// An operation's outcome: empty message on success, one readable line otherwise.
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

private:
    std::string message_;
};

} // namespace flexnn

#endif // FLEXNN_STATUS_H
