// The dashboard's pages as HTML text, from the API's own messages: what a
// browser gets from infrarsi-server's --http-listen and what `infrarsi
// report ID --html FILE` writes. Pure functions of their arguments: the
// server's handlers fetch the messages (as the caller, with the caller's
// rights) and hand them here.
//
// Every page is whole: its style is inline, its charts are SVG (core/web/
// svg.h), and it refers to nothing outside its own server (a standalone
// report to nothing at all), so that no page fetches anything from the
// internet. Every text that came from a spec, an agent or a trial is
// escaped.
//
// Stable hooks for tests and scripts: the summary's figures are <dd> with
// ids and data-value (full precision), each chart an <svg id="chart-...">,
// the trial table #trials with one <tr data-id=...> per trial.
//
// Thread safety: free functions; no shared state.
#ifndef INFRARSI_CORE_WEB_PAGES_H_
#define INFRARSI_CORE_WEB_PAGES_H_

#include <cstdint>
#include <string>

#include "infrarsi/v1/infrarsi.pb.h"

namespace infrarsi::web {

struct PageStyle {
  // One file to keep (a report attached to a review): no navigation, no
  // live updates, the script inline.
  bool standalone = false;
  std::string who;  // the caller as the navigation bar names it; "" none
};

// Whether a session in this stage can still change (the live page polls
// only while it can).
bool StageIsLive(const std::string& stage_name);

// The page's script: sorting and filtering tables, and the live session
// page's updates (it fetches <page>/content and swaps it in). Served by the
// daemon as /static/dashboard.js, inlined into standalone reports.
extern const char* const kDashboardScript;

std::string LoginPage(const std::string& error);
std::string ErrorPage(int code, const std::string& message, const PageStyle& style);

// Sessions the caller may see: stage, workload, hardware, baseline, best
// speed-up, promoted or not, cost.
std::string SessionListPage(const v1::ListSessionsResponse& sessions, const PageStyle& style);

// A session: its figures, plots (trial history with the best so far and
// failures by class, step time against peak memory with the capacity and
// the memory model's predictions, knob effects with intervals, priors and
// revisions, the doctor's runs per agent and the noise floor, the A/B
// intervals, failed-trial cost by class, knob and patch), the contract and
// its checks, and the sortable, filterable trial table.
std::string SessionPage(const v1::SessionReport& report, const v1::SessionSummary& summary,
                        const PageStyle& style);
// The part of SessionPage that changes as the session runs: the live page
// swaps it in.
std::string SessionContent(const v1::SessionReport& report, const v1::SessionSummary& summary);

std::string AgentsPage(const v1::ListAgentsResponse& agents, int64_t now_unix_ms,
                       const PageStyle& style);

// The bank's entries for `query` (its filters shown in a form).
std::string BankPage(const v1::QueryExperienceResponse& entries,
                     const v1::QueryExperienceRequest& query, const PageStyle& style);

}  // namespace infrarsi::web

#endif  // INFRARSI_CORE_WEB_PAGES_H_
