#include "tests/testing/git_repo.h"

#include <git2.h>

namespace infrarsi::testing {

std::string FileAt(git_repository* repo, const std::string& rev, const std::string& path) {
  git_object* obj = nullptr;
  if (git_revparse_single(&obj, repo, (rev + ":" + path).c_str()) != 0) return "";
  const git_blob* blob = reinterpret_cast<const git_blob*>(obj);
  std::string out(static_cast<const char*>(git_blob_rawcontent(blob)),
                  static_cast<size_t>(git_blob_rawsize(blob)));
  git_object_free(obj);
  return out;
}

std::string MakeGitRepo(const std::string& path, const std::map<std::string, std::string>& files) {
  git_libgit2_init();
  git_repository* repo = nullptr;
  git_treebuilder* tb = nullptr;
  git_tree* tree = nullptr;
  git_signature* sig = nullptr;
  git_oid tree_oid, commit_oid;
  std::string sha;
  bool ok = git_repository_init(&repo, path.c_str(), 0) == 0 &&
            git_treebuilder_new(&tb, repo, nullptr) == 0;
  for (const auto& [name, content] : files) {
    git_oid blob;
    ok = ok && git_blob_create_from_buffer(&blob, repo, content.data(), content.size()) == 0 &&
         git_treebuilder_insert(nullptr, tb, name.c_str(), &blob, GIT_FILEMODE_BLOB) == 0;
  }
  ok = ok && git_treebuilder_write(&tree_oid, tb) == 0 && git_tree_lookup(&tree, repo, &tree_oid) == 0 &&
       git_signature_now(&sig, "Dev", "dev@example.com") == 0 &&
       git_commit_create(&commit_oid, repo, "HEAD", sig, sig, "UTF-8", "init", tree, 0, nullptr) == 0;
  if (ok) {
    char buf[GIT_OID_HEXSZ + 1];
    git_oid_tostr(buf, sizeof(buf), &commit_oid);
    sha = buf;
  }
  git_signature_free(sig);
  git_tree_free(tree);
  git_treebuilder_free(tb);
  git_repository_free(repo);
  git_libgit2_shutdown();
  return sha;
}

}  // namespace infrarsi::testing
