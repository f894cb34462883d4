#include "core/assignment.h"

#include "base/proto_util.h"
#include "base/status_macros.h"

namespace infrarsi {

absl::StatusOr<v1::TrialAssignment> AssignmentFor(const storage::SessionRecord& session,
                                                  const SessionSpec& spec,
                                                  const storage::TrialRecord& t,
                                                  absl::Duration lease_timeout,
                                                  const std::vector<std::string>& exclude_nodes) {
  v1::TrialAssignment a;
  a.set_trial_id(t.id);
  a.set_session_id(session.id);
  a.set_lease_token(t.lease_token);
  ASSIGN_OR_RETURN(Config cfg, DecodeConfigJson(t.config));
  // The command's values: the setting and what the spec derives from it.
  CopyConfig(CommandValues(spec, cfg), a.mutable_config());
  a.set_lease_timeout_ms(absl::ToInt64Milliseconds(lease_timeout));
  a.set_attempt(t.attempts);
  a.set_team(session.team);
  a.mutable_workload()->set_model(spec.model);
  a.mutable_workload()->set_global_batch(spec.global_batch);
  a.mutable_workload()->set_seq_len(spec.seq_len);
  if (spec.executor_kind == SessionSpec::ExecutorKind::kReplay) {
    v1::ReplaySpec* r = a.mutable_executor()->mutable_replay();
    if (!spec.replay.landscape_content.empty()) {
      r->set_landscape(spec.replay.landscape_content);
    } else {
      r->set_landscape_path(spec.replay.landscape);  // a pre-tenancy session's
    }
    r->set_capacity_gib(spec.replay.capacity_gib);
    r->set_noise_pct(spec.replay.noise_pct);
    // Repeatable per (session seed, trial, attempt).
    r->set_seed(spec.seed * 1000003ULL + static_cast<uint64_t>(t.id) * 7919ULL +
                static_cast<uint64_t>(t.attempts));
  } else if (spec.executor_kind == SessionSpec::ExecutorKind::kSim) {
    const SimExecutorSpec& sim = spec.sim;
    v1::SimSpec* p = a.mutable_executor()->mutable_sim();
    v1::SimSpec::Model* m = p->mutable_model();
    m->set_layers(sim.model.layers);
    m->set_hidden(sim.model.hidden);
    m->set_heads(sim.model.heads);
    m->set_kv_heads(sim.model.kv_heads);
    m->set_ffn(sim.model.ffn);
    m->set_vocab(sim.model.vocab);
    m->set_swiglu(sim.model.swiglu);
    m->set_dropout(sim.model.dropout);
    m->set_tied_embeddings(sim.model.tied_embeddings);
    m->set_experts(sim.model.experts);
    m->set_topk(sim.model.topk);
    m->set_expert_ffn(sim.model.expert_ffn);
    m->set_head_dim(sim.model.head_dim);
    m->set_q_lora_rank(sim.model.q_lora_rank);
    m->set_kv_lora_rank(sim.model.kv_lora_rank);
    m->set_rope_head_dim(sim.model.rope_head_dim);
    m->set_v_head_dim(sim.model.v_head_dim);
    m->set_shared_expert_ffn(sim.model.shared_expert_ffn);
    m->set_dense_layers(sim.model.dense_layers);
    m->set_window(sim.model.window);
    m->set_global_every(sim.model.global_every);
    m->set_seq_len(sim.model.seq_len);
    m->set_global_batch(sim.model.global_batch);
    v1::SimSpec::Cluster* c = p->mutable_cluster();
    c->set_gpu(sim.cluster.gpu.name);
    c->set_gpus_per_node(sim.cluster.gpus_per_node);
    c->set_nodes(sim.cluster.nodes);
    c->set_nvlink_domain(sim.cluster.nvlink_domain);
    c->set_nvlink_gbps(sim.cluster.nvlink_gbps);
    c->set_net_gbps(sim.cluster.net_gbps);
    c->set_nvlink_latency_us(sim.cluster.nvlink_latency_us);
    c->set_net_latency_us(sim.cluster.net_latency_us);
    c->set_noise_cv(sim.cluster.noise_cv);
    c->set_straggler_prob(sim.cluster.straggler_prob);
    c->set_straggler_slowdown(sim.cluster.straggler_slowdown);
    c->set_drift_pct(sim.cluster.drift_pct);
    c->set_seed(sim.cluster.seed);
    for (const auto& [k, v] : sim.fixed) (*p->mutable_fixed())[k] = v;
    p->set_warmup_steps(sim.warmup_steps);
    p->set_timed_steps(sim.timed_steps);
    p->set_trial_seed(spec.seed * 1000003ULL + static_cast<uint64_t>(t.id) * 7919ULL +
                      static_cast<uint64_t>(t.attempts));
    p->set_trial_index(t.id);
  } else {
    v1::ProcessSpec* p = a.mutable_executor()->mutable_process();
    for (const std::string& arg : spec.process.argv) p->add_argv(arg);
    p->set_workdir(spec.process.workdir);
    p->set_timeout_s(spec.process.timeout_s);
    p->set_watchdog_s(spec.process.watchdog_s);
    for (const auto& [name, value] : spec.process.env) (*p->mutable_env())[name] = value;
    if (const LogReaderSpec& r = spec.process.metrics; !r.UsesHarness()) {
      v1::MetricsReader* m = p->mutable_metrics();
      m->set_reader(r.reader);
      m->set_stream(r.stream);
      m->set_pattern(r.pattern);
      m->set_warmup_steps(r.warmup_steps);
      m->set_tokens_per_step(spec.contract.tokens_per_step);
      m->set_global_batch(spec.global_batch);
      m->set_world(spec.gpu_count);
    }
    for (const auto& [path, hash] : spec.contract.protected_hashes) {
      (*p->mutable_protected_hashes())[path] = hash;
    }
    if (!spec.repository.url.empty()) {
      v1::SourceSpec* src = p->mutable_source();
      src->set_repository(spec.repository.url);
      src->set_base_commit(spec.repository.base_commit);
      ASSIGN_OR_RETURN(Config cfg, DecodeConfigJson(t.config));
      for (const PatchSpec* patch : spec.PatchesOn(cfg)) {
        v1::SourceSpec::Patch* sp = src->add_patches();
        sp->set_name(patch->name);
        sp->set_diff(patch->diff);
      }
    }
  }
  // A process (or the simulator) placed by Slurm.
  if (spec.slurm.enabled) {
    v1::SlurmSpec* sl = a.mutable_executor()->mutable_slurm();
    sl->set_gpus(spec.gpu_count);
    sl->set_gpus_per_node(spec.slurm.gpus_per_node);
    sl->set_partition(spec.slurm.partition);
    sl->set_account(spec.slurm.account);
    sl->set_qos(spec.slurm.qos);
    sl->set_time_limit_min(spec.slurm.time_limit_min);
    for (const std::string& o : spec.slurm.sbatch_options) sl->add_sbatch_options(o);
    if (spec.slurm.exclude_failed_nodes) {
      for (const std::string& n : exclude_nodes) sl->add_exclude_nodes(n);
    }
  }
  return a;
}

}  // namespace infrarsi
