// A git repository with one commit, made with libgit2, for tests.
#ifndef INFRARSI_TESTS_TESTING_GIT_REPO_H_
#define INFRARSI_TESTS_TESTING_GIT_REPO_H_

#include <map>
#include <string>

namespace infrarsi::testing {

// Creates a repository at `path` whose HEAD commit holds `files` (path ->
// content, top-level names only). Returns the commit's SHA-1, "" on failure.
std::string MakeGitRepo(const std::string& path, const std::map<std::string, std::string>& files);

}  // namespace infrarsi::testing

#endif  // INFRARSI_TESTS_TESTING_GIT_REPO_H_
