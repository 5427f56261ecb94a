#include "src/health/endpoint.hpp"

#include <httplib.h>
#include <pthread.h>
#include <sys/socket.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/health/json.hpp"
#include "src/health/prometheus.hpp"

namespace weft::health {

absl::StatusOr<std::unique_ptr<Endpoint>> Endpoint::start(const Monitor& monitor,
                                                         const std::string& address, int port,
                                                         std::function<std::string()> route) {
  std::unique_ptr<Endpoint> e(new Endpoint());
  e->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *e->server_;
  // SO_REUSEADDR alone: httplib's default adds SO_REUSEPORT, which would let a second server
  // (another job, a communicator still alive) share the port and answer half the requests.
  server.set_socket_options([](int fd) {
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  });
  // One worker and no keep-alive: a scraper's idle connection would otherwise hold a worker
  // that stop() cannot wake, and the communicator's destruction would wait for it.
  server.new_task_queue = [] { return new httplib::ThreadPool(1); };
  server.set_keep_alive_max_count(1);
  server.set_read_timeout(1, 0);
  server.Get("/health", [&monitor](const httplib::Request&, httplib::Response& res) {
    res.set_content(health_json(monitor.rank(), monitor.snapshot(), absl::Now()) + "\n",
                    "application/json");
  });
  server.Get("/metrics", [&monitor](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_text(monitor.rank(), monitor.snapshot()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  if (route) {
    server.Get("/route", [route = std::move(route)](const httplib::Request&, httplib::Response& res) {
      res.set_content(route() + "\n", "application/json");
    });
  }
  server.Get("/", [port](const httplib::Request&, httplib::Response& res) {
    res.set_content("weft health endpoint: GET /health (JSON), GET /metrics (Prometheus), GET "
                    "/route (JSON: route epoch, ring, changes)\n",
                    "text/plain");
  });
  if (!server.bind_to_port(address, port)) {
    return absl::UnavailableError(absl::StrCat(
        "WEFT_HEALTH_ENDPOINT: cannot listen on ", address, ":", port,
        " (in use?); pick another base port: each rank takes the base plus its local rank"));
  }
  e->port_ = port;
  e->thread_ = std::thread([&server] { server.listen_after_bind(); });
  pthread_setname_np(e->thread_.native_handle(), "weft-health-web");
  // stop() does nothing until the server runs, so the destructor could otherwise join a
  // thread that goes on listening: wait (bounded) until it does.
  for (int i = 0; i < 2000 && !server.is_running(); ++i) absl::SleepFor(absl::Milliseconds(1));
  return e;
}

Endpoint::~Endpoint() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace weft::health
