#include "serve/serving_stack.h"

namespace strata {

StatusOr<std::unique_ptr<ServingStack>> ServingStack::start(const ServeOptions& options) {
  std::unique_ptr<ServingStack> s(new ServingStack());
  STRATA_ASSIGN_OR_RETURN(s->runner_, make_model_runner(options.model_dir, options.runner));
  auto tok = load_tokenizer_from_dir(options.model_dir);
  if (tok.ok()) {
    s->tokenizer_ = std::move(*tok);
  } else if (tok.status().code() != StatusCode::kNotFound) {
    return tok.status().with_context("loading the tokenizer");
  }
  const std::string name =
      options.http.model_name.empty() ? s->runner_->info().name : options.http.model_name;
  s->metrics_ = std::make_unique<ServerMetrics>(name);
  s->engine_ = std::make_unique<Engine>(s->runner_.get(), s->tokenizer_.get(), options.engine);
  s->engine_->set_observer(s->metrics_.get());
  s->engine_->start();
  HttpServerOptions http = options.http;
  http.model_name = name;
  s->http_ = std::make_unique<HttpServer>(s->engine_.get(), s->metrics_.get(), http);
  Status st = s->http_->start();
  if (!st.ok()) {
    s->shutdown();
    return st;
  }
  return s;
}

ServingStack::~ServingStack() { shutdown(); }

void ServingStack::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (engine_) engine_->shutdown();
  if (http_) http_->stop();
}

}  // namespace strata
