// HttpFrontEnd on libmicrohttpd (see http_front_end.h).
//
// One request's life: the access handler is called once with the headers (a Content-Length
// past the limit is answered 413 at once), then with each piece of the body, then with no
// data: the connection is suspended and the request goes to a worker, which runs the
// pre-routing and route handlers, stores the response and resumes the connection; the
// access handler, called again, queues it. A streamed response is a libmicrohttpd callback
// response fed by the worker through a buffer: when the buffer is empty the reader suspends
// the connection, and the next write (or the end) resumes it.
#include "serve/http_front_end.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "serve/openai_api.h"

namespace strata {

namespace {

constexpr size_t kStreamBufferBytes = 1 << 20;  // a writer waits past this
constexpr size_t kReaderBlockBytes = 16 << 10;

// A fixed set of threads running queued tasks in order.
class TaskQueue {
 public:
  explicit TaskQueue(int threads) {
    for (int i = 0; i < std::max(1, threads); ++i) workers_.emplace_back([this] { run(); });
  }
  ~TaskQueue() { shutdown(); }
  void push(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }
  // Runs what is queued, then joins.
  void shutdown() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_)
      if (t.joinable()) t.join();
  }

 private:
  void run() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return closing_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> workers_;
  bool closing_ = false;
};

// The bytes a streaming provider has written and the client has not read yet.
struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::string buf;
  MHD_Connection* conn = nullptr;
  bool suspended = false;  // the reader suspended the connection for want of data
  bool finished = false;   // the provider called done()
  bool failed = false;     // the provider returned false without done()
  bool closed = false;     // the response is gone (client left, or the server stops)

  void resume_locked() {
    if (suspended && !closed) {
      suspended = false;
      MHD_resume_connection(conn);
    }
  }
};

std::string address_text(const sockaddr* sa, int* port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    *port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    *port = ntohs(in6->sin6_port);
  }
  return buf;
}

// Into a httplib::Headers (case-insensitive names: RFC 9110 §5.1) or httplib::Params: `Map`
// must be the real type of *cls (the two multimaps order their keys differently).
template <class Map>
MHD_Result collect_value(void* cls, MHD_ValueKind, const char* key, const char* value) {
  static_cast<Map*>(cls)->emplace(key, value ? value : "");
  return MHD_YES;
}

// Binds a listening socket on host:port (SO_REUSEADDR only). Returns the descriptor or -1.
int bind_listener(const std::string& host, int port, int backlog, int* bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res) != 0)
    return -1;
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, backlog) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return -1;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *bound_port = 0;
  address_text(reinterpret_cast<sockaddr*>(&ss), bound_port);
  return fd;
}

// Raises this process's soft RLIMIT_NOFILE towards `want` (at most the hard limit), as
// vLLM does at start: Debian's default soft limit of 1,024 descriptors would cap the open
// connections far below connection_limit.
void raise_descriptor_limit(rlim_t want) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want) return;
  rl.rlim_cur = std::min(want, rl.rlim_max);
  setrlimit(RLIMIT_NOFILE, &rl);
}

}  // namespace

// One request on a connection (libmicrohttpd's per-request closure pointer).
struct RequestContext {
  httplib::Request req;
  httplib::Response res;
  size_t body_bytes = 0;      // as sent, also when dropped
  int fd = -1;                // the connection's descriptor
  bool dispatched = false;    // handed to a worker
  bool ready = false;         // the worker built `response` (guarded by Impl::mu)
  int res_status = 200;
  MHD_Response* response = nullptr;  // built on the worker, queued by the access handler
  std::shared_ptr<Stream> stream;
  ~RequestContext() {
    if (response != nullptr) MHD_destroy_response(response);
  }
};

thread_local int t_client_fd = -1;

struct HttpFrontEnd::Impl {
  explicit Impl(HttpFrontEndOptions o) : options(std::move(o)) {}
  HttpFrontEndOptions options;
  std::map<std::string, Handler> get_routes, post_routes;
  PreRoutingHandler pre_routing;
  Handler error_handler;
  MHD_Daemon* daemon = nullptr;
  int listen_fd = -1;
  std::unique_ptr<TaskQueue> request_workers, control_workers;

  std::mutex mu;  // guards the fields below
  std::set<std::shared_ptr<Stream>> streams;  // streaming responses in flight
  bool stopping = false;
  std::mutex stop_mu;
  std::condition_variable stopped_cv;
  bool stopped = false;

  static void fill_request(MHD_Connection* conn, const char* url, const char* method,
                           const char* version, httplib::Request* req, int& ctx_fd) {
    req->method = method;
    req->path = url;
    req->version = version;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_value<httplib::Headers>, &req->headers);
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect_value<httplib::Params>, &req->params);
    req->target = req->path;
    bool first = true;
    for (const auto& [k, v] : req->params) {
      req->target += (first ? "?" : "&") + k + (v.empty() ? "" : "=" + v);
      first = false;
    }
    if (const MHD_ConnectionInfo* ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS))
      req->remote_addr = address_text(ci->client_addr, &req->remote_port);
    if (const MHD_ConnectionInfo* ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD)) {
      ctx_fd = ci->connect_fd;
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      if (getsockname(ci->connect_fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
        req->local_addr = address_text(reinterpret_cast<sockaddr*>(&ss), &req->local_port);
    }
  }

  // Pre-routing, routing and the error handler, on a worker.
  void handle(RequestContext* ctx) {
    t_client_fd = ctx->fd;
    httplib::Request& req = ctx->req;
    httplib::Response& res = ctx->res;
    try {
      if (!(pre_routing && pre_routing(req, res))) {
        const bool get = req.method == "GET" || req.method == "HEAD";
        const auto& routes = get ? get_routes : post_routes;
        auto it = (get || req.method == "POST") ? routes.find(req.path) : routes.end();
        if (it != routes.end()) {
          it->second(req, res);
        } else {
          res.status = 404;
        }
      }
    } catch (const std::exception& e) {
      res = httplib::Response();
      res.status = 500;
      res.set_content(render_error({500, "internal_error", "", std::string("internal error: ") + e.what()}),
                      "application/json");
    }
    t_client_fd = -1;
    if (res.status < 0) res.status = 200;
    if (res.status >= 400 && res.body.empty() && !res.content_provider_ && error_handler)
      error_handler(req, res);
  }

  // Runs the provider of a streamed response until it ends or the client leaves.
  void produce(RequestContext* ctx, const std::shared_ptr<Stream>& s) {
    httplib::DataSink sink;
    sink.write = [s](const char* data, size_t n) {
      std::unique_lock<std::mutex> lock(s->mu);
      s->cv.wait(lock, [&] { return s->closed || s->buf.size() < kStreamBufferBytes; });
      if (s->closed) return false;
      s->buf.append(data, n);
      s->resume_locked();
      return true;
    };
    sink.is_writable = [s] {
      std::lock_guard<std::mutex> lock(s->mu);
      return !s->closed;
    };
    sink.done = [s] {
      std::lock_guard<std::mutex> lock(s->mu);
      s->finished = true;
      s->resume_locked();
    };
    size_t offset = 0;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(s->mu);
        if (s->finished || s->closed) break;
        offset = s->buf.size();  // the provider's offset is informational here
      }
      bool ok = false;
      try {
        ok = ctx->res.content_provider_(offset, 0, sink);
      } catch (const std::exception&) {
        ok = false;
      }
      if (!ok) {
        std::lock_guard<std::mutex> lock(s->mu);
        if (!s->finished) s->failed = true;
        s->resume_locked();
        break;
      }
    }
    std::unique_lock<std::mutex> lock(s->mu);
    // The client has read everything (or left) before success is known.
    s->cv.wait(lock, [&] { return s->closed || (s->buf.empty() && (s->finished || s->failed)); });
    ctx->res.content_provider_success_ = s->finished && !s->failed && s->buf.empty();
  }

  // Worker side of one request.
  void run(const std::shared_ptr<RequestContext>& ctx, MHD_Connection* conn) {
    handle(ctx.get());
    std::shared_ptr<Stream> s;
    if (ctx->res.content_provider_) {
      s = std::make_shared<Stream>();
      s->conn = conn;
      ctx->stream = s;
    }
    ctx->res_status = ctx->res.status;
    ctx->response = build_response(ctx.get());
    if (ctx->response == nullptr && s) s->closed = true;  // nothing will read it
    {
      std::lock_guard<std::mutex> lock(mu);
      if (s) streams.insert(s);
      ctx->ready = true;
      MHD_resume_connection(conn);
    }
    if (!s) return;
    produce(ctx.get(), s);
    {
      std::lock_guard<std::mutex> lock(mu);
      streams.erase(s);
    }
    // The releaser runs here, on the worker, with the success flag produce() set.
    httplib::Response done = std::move(ctx->res);
    ctx->res = httplib::Response();
    (void)done;
  }

  static ssize_t read_stream(void* cls, uint64_t, char* out, size_t max) {
    auto* s = static_cast<Stream*>(cls);
    std::lock_guard<std::mutex> lock(s->mu);
    if (!s->buf.empty()) {
      const size_t n = std::min(max, s->buf.size());
      std::memcpy(out, s->buf.data(), n);
      s->buf.erase(0, n);
      s->cv.notify_all();
      return static_cast<ssize_t>(n);
    }
    if (s->failed || s->closed) return MHD_CONTENT_READER_END_WITH_ERROR;
    if (s->finished) return MHD_CONTENT_READER_END_OF_STREAM;
    s->suspended = true;
    MHD_suspend_connection(s->conn);
    return 0;
  }

  static void free_stream(void* cls) {
    // The response is gone: the connection closed or the stream ended.
    auto* s = static_cast<Stream*>(cls);
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->closed = true;
      s->suspended = false;
      s->cv.notify_all();
    }
  }

  // The libmicrohttpd response for ctx->res (built where res is written, so the access
  // handler never reads res while a stream's worker still uses it).
  static MHD_Response* build_response(RequestContext* ctx) {
    httplib::Response& res = ctx->res;
    MHD_Response* r = nullptr;
    if (ctx->stream) {
      // The Stream lives while either side holds it: the worker's shared_ptr and this raw
      // pointer, released by free_stream (the worker waits for `closed` or the end).
      auto* holder = new std::shared_ptr<Stream>(ctx->stream);
      r = MHD_create_response_from_callback(
          MHD_SIZE_UNKNOWN, kReaderBlockBytes,
          [](void* cls, uint64_t pos, char* buf, size_t max) {
            return read_stream(static_cast<std::shared_ptr<Stream>*>(cls)->get(), pos, buf, max);
          },
          holder,
          [](void* cls) {
            auto* h = static_cast<std::shared_ptr<Stream>*>(cls);
            free_stream(h->get());
            delete h;
          });
    } else {
      r = MHD_create_response_from_buffer(res.body.size(), res.body.data(), MHD_RESPMEM_MUST_COPY);
    }
    if (r == nullptr) return nullptr;
    for (const auto& [k, v] : res.headers) {
      if (strcasecmp(k.c_str(), "Content-Length") == 0 ||
          strcasecmp(k.c_str(), "Transfer-Encoding") == 0 ||
          (strcasecmp(k.c_str(), "Connection") == 0 && strcasecmp(v.c_str(), "close") != 0))
        continue;  // framing is libmicrohttpd's; a handler may only ask to close
      MHD_add_response_header(r, k.c_str(), v.c_str());
    }
    return r;
  }

  // Queues ctx->response (status ctx->res.status) and gives it to the connection.
  static MHD_Result queue(MHD_Connection* conn, RequestContext* ctx) {
    MHD_Response* r = ctx->response;
    ctx->response = nullptr;
    if (r == nullptr) return MHD_NO;
    const MHD_Result ret = MHD_queue_response(conn, static_cast<unsigned>(ctx->res_status), r);
    MHD_destroy_response(r);
    return ret;
  }

  MHD_Result answer_now(MHD_Connection* conn, int status, const std::string& body) {
    RequestContext tmp;
    tmp.res.status = status;
    tmp.res_status = status;
    tmp.res.set_content(body, "application/json");
    tmp.response = build_response(&tmp);
    return queue(conn, &tmp);
  }

  MHD_Result access(MHD_Connection* conn, const char* url, const char* method, const char* version,
                    const char* upload, size_t* upload_size, void** cls) {
    auto* holder = static_cast<std::shared_ptr<RequestContext>*>(*cls);
    if (holder == nullptr) {
      // Shared with the worker, which may outlive the connection while a stream ends.
      holder = new std::shared_ptr<RequestContext>(std::make_shared<RequestContext>());
      *cls = holder;
      RequestContext* ctx = holder->get();
      fill_request(conn, url, method, version, &ctx->req, ctx->fd);
      const std::string cl = ctx->req.get_header_value("Content-Length");
      if (options.max_body_bytes > 0 && !cl.empty() &&
          std::strtoull(cl.c_str(), nullptr, 10) > options.max_body_bytes)
        return queue_too_large(conn, std::strtoull(cl.c_str(), nullptr, 10));
      return MHD_YES;
    }
    RequestContext* ctx = holder->get();
    if (*upload_size > 0) {
      ctx->body_bytes += *upload_size;
      if (options.max_body_bytes == 0 || ctx->body_bytes <= options.max_body_bytes)
        ctx->req.body.append(upload, *upload_size);
      *upload_size = 0;
      return MHD_YES;
    }
    if (options.max_body_bytes > 0 && ctx->body_bytes > options.max_body_bytes)
      return queue_too_large(conn, ctx->body_bytes);
    std::unique_lock<std::mutex> lock(mu);
    if (!ctx->dispatched) {
      if (stopping) {
        lock.unlock();
        return answer_now(conn, 503, render_error({503, "service_unavailable", "", "server is stopping"}));
      }
      ctx->dispatched = true;
      MHD_suspend_connection(conn);
      TaskQueue& q = ctx->req.method == "POST" ? *request_workers : *control_workers;
      q.push([this, c = *holder, conn] { run(c, conn); });
      return MHD_YES;
    }
    if (!ctx->ready) return MHD_YES;  // resumed early; the worker resumes again
    lock.unlock();
    return queue(conn, ctx);
  }

  MHD_Result queue_too_large(MHD_Connection* conn, unsigned long long bytes) {
    return answer_now(conn, 413, render_error({413, "invalid_request_error", "",
        fmt::format("request body is too large ({} bytes, at most {})", bytes,
                    options.max_body_bytes)}));
  }
};

HttpFrontEnd::HttpFrontEnd(HttpFrontEndOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

HttpFrontEnd::~HttpFrontEnd() { stop(); }

int HttpFrontEnd::client_fd() { return t_client_fd; }

void HttpFrontEnd::Get(const std::string& path, Handler h) { impl_->get_routes[path] = std::move(h); }
void HttpFrontEnd::Post(const std::string& path, Handler h) { impl_->post_routes[path] = std::move(h); }
void HttpFrontEnd::set_pre_routing_handler(PreRoutingHandler h) { impl_->pre_routing = std::move(h); }
void HttpFrontEnd::set_error_handler(Handler h) { impl_->error_handler = std::move(h); }

Status HttpFrontEnd::start() {
  Impl& m = *impl_;
  const HttpFrontEndOptions& o = m.options;
  raise_descriptor_limit(static_cast<rlim_t>(o.connection_limit) + 1024);
  m.listen_fd = bind_listener(o.host, o.port, o.listen_backlog, &port_);
  if (m.listen_fd < 0) {
    port_ = -1;
    return Status(StatusCode::kUnavailable, fmt::format("cannot bind {}:{}", o.host, o.port));
  }
  m.request_workers = std::make_unique<TaskQueue>(o.threads);
  m.control_workers = std::make_unique<TaskQueue>(o.control_threads);
  MHD_AccessHandlerCallback access = [](void* cls, MHD_Connection* conn, const char* url,
                                        const char* method, const char* version, const char* upload,
                                        size_t* upload_size, void** con_cls) {
    return static_cast<Impl*>(cls)->access(conn, url, method, version, upload, upload_size, con_cls);
  };
  MHD_RequestCompletedCallback completed = [](void*, MHD_Connection*, void** con_cls,
                                              MHD_RequestTerminationCode) {
    delete static_cast<std::shared_ptr<RequestContext>*>(*con_cls);
    *con_cls = nullptr;
  };
  m.daemon = MHD_start_daemon(
      MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME, 0, nullptr, nullptr, access, &m,
      MHD_OPTION_LISTEN_SOCKET, static_cast<MHD_socket>(m.listen_fd),
      MHD_OPTION_NOTIFY_COMPLETED, completed, nullptr,
      MHD_OPTION_CONNECTION_TIMEOUT, static_cast<unsigned>(std::max(1, o.idle_timeout_s)),
      MHD_OPTION_CONNECTION_LIMIT, static_cast<unsigned>(std::max(1, o.connection_limit)),
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<size_t>(std::max<size_t>(o.max_header_bytes, 4096) + 4096),
      MHD_OPTION_END);
  if (m.daemon == nullptr) {
    ::close(m.listen_fd);
    m.listen_fd = -1;
    m.request_workers.reset();
    m.control_workers.reset();
    port_ = -1;
    return Status(StatusCode::kUnavailable,
                  fmt::format("cannot start the HTTP server on {}:{}", o.host, o.port));
  }
  return ok_status();
}

void HttpFrontEnd::stop() {
  Impl& m = *impl_;
  if (m.daemon == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.stopping) return;
    m.stopping = true;
    for (const std::shared_ptr<Stream>& s : m.streams) {
      std::lock_guard<std::mutex> sl(s->mu);
      s->resume_locked();
      s->closed = true;
      s->cv.notify_all();
    }
  }
  // Running handlers end (the engine was shut down first); queued ones run and answer.
  m.request_workers->shutdown();
  m.control_workers->shutdown();
  MHD_stop_daemon(m.daemon);
  m.daemon = nullptr;
  ::close(m.listen_fd);
  m.listen_fd = -1;
  {
    std::lock_guard<std::mutex> lock(m.stop_mu);
    m.stopped = true;
  }
  m.stopped_cv.notify_all();
}

void HttpFrontEnd::wait() {
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.stop_mu);
  m.stopped_cv.wait(lock, [&] { return m.stopped || m.daemon == nullptr; });
}

}  // namespace strata
