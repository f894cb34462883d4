// Git repositories for tests, with libgit2: one made, files read back.
#ifndef INFRARSI_TESTS_TESTING_GIT_REPO_H_
#define INFRARSI_TESTS_TESTING_GIT_REPO_H_

#include <map>
#include <string>

struct git_repository;  // libgit2's

namespace infrarsi::testing {

// Creates a repository at `path` whose HEAD commit holds `files` (path ->
// content, top-level names only). Returns the commit's SHA-1, "" on failure.
std::string MakeGitRepo(const std::string& path, const std::map<std::string, std::string>& files);

// The content of `path` in the tree of `rev` (any revision git parses) of
// an open repository, or "" when absent.
std::string FileAt(git_repository* repo, const std::string& rev, const std::string& path);

}  // namespace infrarsi::testing

#endif  // INFRARSI_TESTS_TESTING_GIT_REPO_H_
