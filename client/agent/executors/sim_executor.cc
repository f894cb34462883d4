#include "client/agent/executors/sim_executor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace infrarsi::client {

namespace ms = models::sim;

absl::Status SimInputs(const v1::TrialAssignment& trial, ms::ModelShape* m, ms::ClusterShape* c,
                       ms::LaunchKnobs* k) {
  const v1::SimSpec& spec = trial.executor().sim();
  const auto& pm = spec.model();
  m->layers = pm.layers();
  m->hidden = pm.hidden();
  m->heads = pm.heads();
  m->kv_heads = pm.kv_heads();
  m->ffn = pm.ffn();
  m->vocab = pm.vocab();
  m->swiglu = pm.swiglu();
  m->dropout = pm.dropout();
  m->tied_embeddings = pm.tied_embeddings();
  m->experts = pm.experts();
  m->topk = pm.topk();
  m->expert_ffn = pm.expert_ffn();
  m->head_dim = pm.head_dim();
  m->q_lora_rank = pm.q_lora_rank();
  m->kv_lora_rank = pm.kv_lora_rank();
  m->rope_head_dim = pm.rope_head_dim();
  m->v_head_dim = pm.v_head_dim();
  m->shared_expert_ffn = pm.shared_expert_ffn();
  m->dense_layers = pm.dense_layers();
  m->window = pm.window();
  m->global_every = pm.global_every();
  m->seq_len = pm.seq_len();
  m->global_batch = pm.global_batch();
  if (m->layers <= 0 || m->hidden <= 0 || m->heads <= 0 || m->seq_len <= 0 ||
      m->global_batch <= 0 || (m->head_dim == 0 && m->hidden % m->heads != 0) || m->head_dim < 0 ||
      m->q_lora_rank < 0 || m->kv_lora_rank < 0 || m->rope_head_dim < 0 || m->v_head_dim < 0 ||
      m->shared_expert_ffn < 0 || m->dense_layers < 0 || m->dense_layers > m->layers ||
      m->window < 0 || m->global_every < 0) {
    return absl::InvalidArgumentError("sim: malformed model in the trial");
  }
  const auto& pc = spec.cluster();
  const ms::GpuSpec* gpu = ms::FindGpu(pc.gpu());
  if (gpu == nullptr) return absl::InvalidArgumentError(absl::StrCat("sim: unknown GPU ", pc.gpu()));
  c->gpu = *gpu;
  c->gpus_per_node = pc.gpus_per_node();
  c->nodes = pc.nodes();
  c->nvlink_domain = pc.nvlink_domain();
  c->nvlink_gbps = pc.nvlink_gbps();
  c->net_gbps = pc.net_gbps();
  c->nvlink_latency_us = pc.nvlink_latency_us();
  c->net_latency_us = pc.net_latency_us();
  c->noise_cv = pc.noise_cv();
  c->straggler_prob = pc.straggler_prob();
  c->straggler_slowdown = pc.straggler_slowdown();
  c->drift_pct = pc.drift_pct();
  c->seed = pc.seed();
  if (c->gpus_per_node <= 0 || c->nodes <= 0 || c->nvlink_gbps <= 0 || c->net_gbps <= 0 ||
      c->nvlink_domain < 0) {
    return absl::InvalidArgumentError("sim: malformed cluster in the trial");
  }
  std::string err;
  for (const auto& [name, value] : spec.fixed()) {
    if (!ms::SetKnob(k, name, value, &err)) return absl::InvalidArgumentError("sim: " + err);
  }
  for (const auto& [name, value] : trial.config()) {
    if (!ms::SetKnob(k, name, value, &err)) return absl::InvalidArgumentError("sim: " + err);
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::TrialOutcome> SimExecutor::Run(const v1::TrialAssignment& trial,
                                                  ProgressSink* sink) {
  ms::ModelShape model;
  ms::ClusterShape cluster;
  ms::LaunchKnobs knobs;
  if (absl::Status st = SimInputs(trial, &model, &cluster, &knobs); !st.ok()) return st;
  const v1::SimSpec& spec = trial.executor().sim();
  const ms::Measurement meas =
      ms::MeasureTrial(model, cluster, knobs, spec.warmup_steps(), spec.timed_steps(),
                       spec.trial_seed(), spec.trial_index());
  v1::TrialOutcome out;
  out.set_clock("simulated");
  out.set_wall_s(meas.wall_s);
  out.set_peak_mem_gib(meas.peak_mem_gib);
  out.set_note(absl::StrFormat("simulated %s x%d; MFU %.1f%% noise-free", cluster.gpu.name,
                               cluster.world(), 100.0 * meas.truth.mfu));
  if (meas.status != ms::Status::kOk) {
    out.set_status(ms::StatusName(meas.status));
    // The failure class the report counts: a refused launch, not a crash.
    out.set_error(meas.status == ms::Status::kLauncherError ? absl::StrCat("launcher: ", meas.message)
                                                            : meas.message);
    return out;
  }
  std::vector<v1::StepMetrics> steps;
  for (const ms::StepSample& s : meas.steps) {
    v1::StepMetrics m;
    m.set_step(s.step);
    m.set_loss(s.loss);
    m.set_tokens(s.tokens);
    m.set_step_time_s(s.step_time_s);
    m.set_peak_mem_gib(meas.peak_mem_gib);
    m.set_warmup(s.warmup);
    for (const auto& [name, secs] : s.phases) (*m.mutable_phases())[name] = secs;
    steps.push_back(std::move(m));
  }
  if (!sink->OnSteps(steps)) {
    out.set_status("failed");
    out.set_error("stopped: lease lost or session cancelled");
    return out;
  }
  out.set_status("ok");
  return out;
}

}  // namespace infrarsi::client
