// Closing a link's sockets without losing what they still carry. A socket closed while
// bytes wait unread in it (the peer's last acknowledgements) makes the kernel reset the
// connection and drop what this side sent but the peer has not yet received: the last bytes
// of a collective the peer is still reading. So a closing socket is half-closed (its pending
// bytes leave, then a FIN) and handed to one process-wide thread that reads and drops what
// still arrives until the peer closes too, or kLingerSeconds pass; then it is closed.
#pragma once

namespace weft::transport::tcp {

inline constexpr int kLingerSeconds = 10;

/// Takes ownership of `fd` and closes it gracefully, without blocking the caller.
void close_gracefully(int fd);

}  // namespace weft::transport::tcp
