// ForwardingStorage: a Storage that passes every call to another one. Tests
// derive from it to observe or hold a single call (count the reads a
// start-up makes, stop a bank query half-way) without re-implementing the
// rest. It has no reader of its own (OpenReader: UNIMPLEMENTED), so a
// manager built on it reads through it too.
#ifndef INFRARSI_TESTS_TESTING_FORWARDING_STORAGE_H_
#define INFRARSI_TESTS_TESTING_FORWARDING_STORAGE_H_

#include "storage/storage.h"

namespace infrarsi::testing {

class ForwardingStorage : public storage::Storage {
 public:
  // `inner`: not owned; must outlive this.
  explicit ForwardingStorage(storage::Storage* inner) : inner_(inner) {}

  absl::Status Transaction(const std::function<absl::Status()>& fn) override {
    return inner_->Transaction(fn);
  }
  absl::Status InsertSession(const storage::SessionRecord& s) override {
    return inner_->InsertSession(s);
  }
  absl::Status UpdateSession(const storage::SessionRecord& s) override {
    return inner_->UpdateSession(s);
  }
  absl::StatusOr<storage::SessionRecord> GetSession(const std::string& id) override {
    return inner_->GetSession(id);
  }
  absl::StatusOr<std::vector<storage::SessionRecord>> ListSessions() override {
    return inner_->ListSessions();
  }
  absl::StatusOr<std::vector<storage::SessionRecord>> ListSessionsPage(
      const storage::SessionQuery& q) override {
    return inner_->ListSessionsPage(q);
  }
  absl::StatusOr<int64_t> InsertTrial(const storage::TrialRecord& t) override {
    return inner_->InsertTrial(t);
  }
  absl::Status UpdateTrial(const storage::TrialRecord& t) override {
    return inner_->UpdateTrial(t);
  }
  absl::StatusOr<storage::TrialRecord> GetTrial(int64_t id) override {
    return inner_->GetTrial(id);
  }
  absl::StatusOr<std::vector<storage::TrialRecord>> ListTrials(
      const std::string& session_id) override {
    return inner_->ListTrials(session_id);
  }
  absl::StatusOr<std::vector<storage::TrialRecord>> ListTrialsChangedSince(
      const std::string& session_id, int64_t after_rev) override {
    return inner_->ListTrialsChangedSince(session_id, after_rev);
  }
  absl::StatusOr<std::vector<storage::TrialRecord>> ListTrialsByStatus(const std::string& status,
                                                                      int32_t limit) override {
    return inner_->ListTrialsByStatus(status, limit);
  }
  absl::Status PutSteps(const std::vector<storage::StepRecord>& steps) override {
    return inner_->PutSteps(steps);
  }
  absl::StatusOr<std::vector<storage::StepRecord>> ListSteps(int64_t trial_id) override {
    return inner_->ListSteps(trial_id);
  }
  absl::StatusOr<StepTail> ListStepTail(int64_t trial_id, int64_t from_step) override {
    return inner_->ListStepTail(trial_id, from_step);
  }
  absl::Status DeleteSteps(int64_t trial_id) override { return inner_->DeleteSteps(trial_id); }
  absl::Status PutTrialLog(const storage::TrialLogRecord& log) override { return inner_->PutTrialLog(log); }
  absl::Status PutFrozenReport(const storage::FrozenReportRecord& r) override {
    return inner_->PutFrozenReport(r);
  }
  absl::StatusOr<storage::FrozenReportRecord> GetFrozenReport(const std::string& id) override {
    return inner_->GetFrozenReport(id);
  }
  absl::StatusOr<storage::TrialLogRecord> GetTrialLog(int64_t trial_id, const std::string& stream) override {
    return inner_->GetTrialLog(trial_id, stream);
  }
  absl::StatusOr<int64_t> PruneSteps(const std::vector<std::string>& stages, int64_t before_ms,
                                     int32_t limit) override {
    return inner_->PruneSteps(stages, before_ms, limit);
  }
  absl::Status PutAgent(const storage::AgentRecord& a) override { return inner_->PutAgent(a); }
  absl::StatusOr<storage::AgentRecord> GetAgent(const std::string& id) override {
    return inner_->GetAgent(id);
  }
  absl::StatusOr<std::vector<storage::AgentRecord>> ListAgents() override {
    return inner_->ListAgents();
  }
  absl::StatusOr<std::map<std::string, int64_t>> CountSessionsByStage() override {
    return inner_->CountSessionsByStage();
  }
  absl::StatusOr<std::map<std::pair<std::string, std::string>, int64_t>> CountTrialsByStatus()
      override {
    return inner_->CountTrialsByStatus();
  }
  absl::StatusOr<std::map<std::string, int64_t>> CountAgentTrials(
      const std::string& agent_id) override {
    return inner_->CountAgentTrials(agent_id);
  }
  absl::StatusOr<int64_t> AddBankEntry(const storage::BankRecord& b) override {
    return inner_->AddBankEntry(b);
  }
  absl::Status SetBankStatus(int64_t trial_id, const std::string& status) override {
    return inner_->SetBankStatus(trial_id, status);
  }
  absl::StatusOr<std::vector<storage::BankRecord>> QueryBank(
      const storage::BankFilter& f) override {
    return inner_->QueryBank(f);
  }
  absl::StatusOr<int64_t> CountBank() override { return inner_->CountBank(); }
  absl::StatusOr<bool> BankHasKnob(const std::string& knob,
                                   const std::optional<std::string>& team) override {
    return inner_->BankHasKnob(knob, team);
  }
  absl::Status AddRepository(const storage::RepositoryRecord& r) override {
    return inner_->AddRepository(r);
  }
  absl::StatusOr<storage::RepositoryRecord> GetRepository(const std::string& name) override {
    return inner_->GetRepository(name);
  }
  absl::StatusOr<std::vector<storage::RepositoryRecord>> ListRepositories() override {
    return inner_->ListRepositories();
  }
  absl::Status RemoveRepository(const std::string& name) override {
    return inner_->RemoveRepository(name);
  }
  absl::Status AddToken(const storage::TokenRecord& t) override { return inner_->AddToken(t); }
  absl::StatusOr<storage::TokenRecord> GetTokenByHash(const std::string& hash) override {
    return inner_->GetTokenByHash(hash);
  }
  absl::StatusOr<std::vector<storage::TokenRecord>> ListTokens() override {
    return inner_->ListTokens();
  }
  absl::Status RevokeToken(const std::string& id, int64_t at_ms) override {
    return inner_->RevokeToken(id, at_ms);
  }

 protected:
  storage::Storage* inner_;
};

}  // namespace infrarsi::testing

#endif  // INFRARSI_TESTS_TESTING_FORWARDING_STORAGE_H_
