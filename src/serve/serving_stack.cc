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
  const DisaggregationOptions& d = options.disagg;
  if (!d.mode.empty()) {
    if (d.mode != "prefill" && d.mode != "decode")
      return invalid_argument("--disaggregation-mode must be prefill or decode, not '{}'", d.mode);
    STRATA_ASSIGN_OR_RETURN(HandoffContract contract,
                            make_handoff_contract(*s->runner_, options.model_dir,
                                                  d.contract_overrides));
    const StateGraph& graph = *s->runner_->state_graph();
    if (d.mode == "prefill") {
      STRATA_ASSIGN_OR_RETURN(s->kv_sender_,
                              KvTransferSender::start(std::move(contract), graph, d.transfer));
      http.kv_sender = s->kv_sender_.get();
    } else {
      std::unique_ptr<TransportClient> client = make_zmq_client();
      if (d.backend == "fault") {
        STRATA_ASSIGN_OR_RETURN(FaultSpec spec, parse_fault_spec(d.fault_spec));
        client = make_fault_client(std::move(client), spec);
      } else if (d.backend != "zmq") {
        return invalid_argument("--disaggregation-transfer-backend must be zmq or fault, not '{}'",
                                d.backend);
      }
      s->kv_receiver_ = std::make_unique<KvTransferReceiver>(std::move(contract), graph,
                                                             std::move(client), d.transfer);
      http.kv_receiver = s->kv_receiver_.get();
      http.kv_load_failure_recompute = d.load_failure_recompute;
    }
    http.disaggregation_mode = d.mode;
  }
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
  if (kv_sender_) kv_sender_->stop();
}

}  // namespace strata
