#include "serve/bench_client.h"

#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace strata {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::unique_ptr<httplib::Client> make_client(const std::string& url, double timeout_s) {
  auto c = std::make_unique<httplib::Client>(url);
  const auto secs = static_cast<time_t>(timeout_s);
  c->set_connection_timeout(10);
  c->set_read_timeout(secs);
  c->set_write_timeout(secs);
  return c;
}

// A cpp-httplib transport error as words for the user (its own names, e.g. "Connection",
// read as a cut-off message).
std::string transport_error(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection: return "could not connect (is a server listening at this URL?)";
    case httplib::Error::ConnectionTimeout: return "connection timed out";
    case httplib::Error::Read: return "the connection failed while reading the response";
    case httplib::Error::Write: return "the connection failed while sending the request";
    case httplib::Error::Canceled: return "request canceled";
    default: return "transport error (" + httplib::to_string(e) + ")";
  }
}

StatusOr<std::string> http_get(const std::string& url, const std::string& path) {
  auto c = make_client(url, 30);
  auto res = c->Get(path);
  if (!res) return Status(StatusCode::kUnavailable, fmt::format("GET {}{}: {}", url, path, transport_error(res.error())));
  if (res->status != 200) return Status(StatusCode::kUnavailable, fmt::format("GET {}{}: HTTP {}", url, path, res->status));
  return res->body;
}

// Sends one streaming completion and fills `out` (except start_s).
void send_one(const std::string& url, const std::string& model, const BenchRequest& req,
              double timeout_s, RequestResult* out) {
  out->prompt_len = static_cast<int64_t>(req.prompt.size());
  json body = {{"model", model},
               {"prompt", req.prompt},
               {"max_tokens", req.output_tokens},
               {"ignore_eos", true},
               {"temperature", 0.0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  auto client = make_client(url, timeout_s);
  httplib::Request hreq;
  hreq.method = "POST";
  hreq.path = "/v1/completions";
  hreq.body = body.dump();
  hreq.set_header("Content-Type", "application/json");
  hreq.set_header("Accept", "text/event-stream");

  const auto t0 = Clock::now();
  std::string buffer;
  bool got_first = false, got_done = false;
  Clock::time_point last_chunk;
  int64_t chunks = 0, usage_tokens = -1;
  std::string error;
  std::string error_body;
  hreq.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buffer.append(data, len);
    size_t pos;
    while ((pos = buffer.find("\n\n")) != std::string::npos) {
      std::string event = buffer.substr(0, pos);
      buffer.erase(0, pos + 2);
      std::istringstream lines(event);
      std::string l;
      while (std::getline(lines, l)) {
        if (l.rfind("data:", 0) != 0) continue;  // comments / keep-alives
        std::string payload = l.substr(5);
        if (!payload.empty() && payload[0] == ' ') payload.erase(0, 1);
        if (payload == "[DONE]") {
          got_done = true;
          continue;
        }
        json j = json::parse(payload, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded()) {
          error = "unparsable SSE data";
          continue;
        }
        if (j.contains("error")) {
          error = j["error"].is_object() && j["error"].contains("message")
                      ? j["error"]["message"].dump() : j["error"].dump();
          continue;
        }
        if (j.contains("usage") && j["usage"].is_object() &&
            j["usage"].contains("completion_tokens")) {
          usage_tokens = j["usage"]["completion_tokens"].get<int64_t>();
        }
        if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
          const json& ch = j["choices"][0];
          const bool has_text = ch.contains("text") && ch["text"].is_string() &&
                                !ch["text"].get<std::string>().empty();
          const bool finish = ch.contains("finish_reason") && !ch["finish_reason"].is_null();
          if (has_text || !finish) {
            const auto now = Clock::now();
            if (!got_first) {
              got_first = true;
              out->ttft_s = std::chrono::duration<double>(now - t0).count();
            } else {
              out->itl_s.push_back(std::chrono::duration<double>(now - last_chunk).count());
            }
            last_chunk = now;
            ++chunks;
          }
        }
      }
    }
    return true;
  };
  httplib::Response hres;
  httplib::Error herr = httplib::Error::Success;
  const bool ok = client->send(hreq, hres, herr);
  out->latency_s = seconds_since(t0);
  if (!ok) {
    out->error = transport_error(herr);
  } else if (hres.status != 200) {
    out->error = fmt::format("HTTP {}: {}", hres.status, buffer.substr(0, 300));
  } else if (!error.empty()) {
    out->error = error;
  } else if (!got_done) {
    out->error = "stream ended without [DONE]";
  } else {
    out->success = true;
    out->output_tokens = usage_tokens >= 0 ? usage_tokens : chunks;
  }
}

}  // namespace

double scrape_counter(const std::string& text, const std::string& suffix) {
  std::istringstream in(text);
  std::string line;
  double sum = 0;
  bool found = false;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string::npos) continue;
    const std::string name = line.substr(0, name_end);
    if (name.size() < suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const size_t sp = line.rfind(' ');
    try {
      sum += std::stod(line.substr(sp + 1));
      found = true;
    } catch (const std::exception&) {
    }
  }
  return found ? sum : -1;
}

StatusOr<ServerInfo> query_server_info(const std::string& url) {
  STRATA_ASSIGN_OR_RETURN(std::string body, http_get(url, "/v1/models"));
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty()) {
    return data_loss("GET /v1/models: unexpected response");
  }
  ServerInfo info;
  info.model = j["data"][0].value("id", "");
  if (j["data"][0].contains("max_model_len") && j["data"][0]["max_model_len"].is_number_integer()) {
    info.max_model_len = j["data"][0]["max_model_len"].get<int64_t>();
  }
  if (j["data"][0].contains("prefix_alignment") &&
      j["data"][0]["prefix_alignment"].is_number_integer()) {
    info.prefix_alignment = j["data"][0]["prefix_alignment"].get<int64_t>();
  }
  if (j["data"][0].contains("vocab_size") && j["data"][0]["vocab_size"].is_number_integer()) {
    info.vocab_size = j["data"][0]["vocab_size"].get<int64_t>();
  }
  return info;
}

StatusOr<BenchRun> run_benchmark(const Workload& workload, const BenchClientOptions& o) {
  if (o.url.rfind("http://", 0) != 0) return invalid_argument("--url must start with http://");
  std::string model = o.model;
  if (model.empty()) {
    STRATA_ASSIGN_OR_RETURN(ServerInfo info, query_server_info(o.url));
    model = info.model;
  }
  BenchRun run;
  auto before = http_get(o.url, "/metrics");
  const size_t n = workload.requests.size();
  run.results.resize(n);

  std::mutex mu;
  std::condition_variable cv;
  int64_t in_flight = 0;
  std::atomic<int64_t> done{0}, failed{0};
  std::vector<std::thread> threads;
  threads.reserve(n);
  const auto t0 = Clock::now();
  std::atomic<bool> monitor_stop{false};
  std::thread monitor;
  // The running line updates in place on a terminal only; a log gets the final line alone.
  if (o.progress && isatty(STDERR_FILENO) != 0) {
    monitor = std::thread([&] {
      while (!monitor_stop) {
        fmt::print(stderr, "\r[bench] {}/{} done, {} failed, {} in flight, {:.1f} s   ",
                   done.load(), n, failed.load(), [&] { std::lock_guard l(mu); return in_flight; }(),
                   seconds_since(t0));
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
      }
    });
  }
  for (size_t i = 0; i < n; ++i) {
    const BenchRequest& req = workload.requests[i];
    const auto due = t0 + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(req.arrival_s));
    std::this_thread::sleep_until(due);
    {
      std::unique_lock lock(mu);
      if (o.max_concurrency > 0) cv.wait(lock, [&] { return in_flight < o.max_concurrency; });
      ++in_flight;
    }
    run.results[i].start_s = seconds_since(t0);
    threads.emplace_back([&, i] {
      send_one(o.url, model, workload.requests[i], o.request_timeout_s, &run.results[i]);
      if (!run.results[i].success) ++failed;
      ++done;
      {
        std::lock_guard lock(mu);
        --in_flight;
      }
      cv.notify_all();
    });
  }
  for (auto& t : threads) t.join();
  run.duration_s = seconds_since(t0);
  monitor_stop = true;
  if (monitor.joinable()) {
    monitor.join();
    fmt::print(stderr, "\r[bench] {}/{} done, {} failed, {:.1f} s                    \n", done.load(),
               n, failed.load(), run.duration_s);
  } else if (o.progress) {
    fmt::print(stderr, "[bench] {}/{} done, {} failed, {:.1f} s\n", done.load(), n, failed.load(),
               run.duration_s);
  }
  auto after = http_get(o.url, "/metrics");
  if (before.ok() && after.ok()) {
    const double q0 = scrape_counter(*before, ":prefix_cache_queries_total");
    const double h0 = scrape_counter(*before, ":prefix_cache_hits_total");
    const double q1 = scrape_counter(*after, ":prefix_cache_queries_total");
    const double h1 = scrape_counter(*after, ":prefix_cache_hits_total");
    if (q0 >= 0 && q1 >= 0 && h0 >= 0 && h1 >= 0) {
      run.prefix_cache_queries = q1 - q0;
      run.prefix_cache_hits = h1 - h0;
    }
    auto delta = [&](const char* suffix) {
      const double a = scrape_counter(*before, suffix), b = scrape_counter(*after, suffix);
      return a >= 0 && b >= 0 ? b - a : -1.0;
    };
    run.spec_drafts = delta(":spec_decode_num_drafts");
    run.spec_draft_tokens = delta(":spec_decode_num_draft_tokens");
    run.spec_accepted_tokens = delta(":spec_decode_num_accepted_tokens");
  }
  return run;
}

}  // namespace strata
