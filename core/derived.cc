#include "core/derived.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace infrarsi {

struct DerivedExpr::Node {
  char op = 0;  // 0: leaf; '+', '-', '*', '/'; 'n': negation
  int64_t number = 0;
  std::string name;  // a leaf naming a knob
  std::shared_ptr<const Node> left, right;
};

namespace {

constexpr int64_t kLimit = int64_t{1} << 40;
constexpr size_t kMaxText = 256;

using NodePtr = std::shared_ptr<const DerivedExpr::Node>;

// Recursive descent over: expr = term (('+'|'-') term)*;
// term = unary (('*'|'/') unary)*; unary = '-' unary | atom;
// atom = integer | name | '(' expr ')'.
class Parser {
 public:
  explicit Parser(const std::string& text) : t_(text) {}

  absl::StatusOr<NodePtr> Whole(std::set<std::string>* names) {
    names_ = names;
    auto e = Expr(0);
    if (!e.ok()) return e;
    Skip();
    if (i_ != t_.size()) return Error("unexpected '" + std::string(1, t_[i_]) + "'");
    return e;
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(what, " at character ", i_ + 1, " of '", t_, "'"));
  }
  void Skip() {
    while (i_ < t_.size() && absl::ascii_isspace(static_cast<unsigned char>(t_[i_]))) ++i_;
  }
  absl::StatusOr<NodePtr> Expr(int depth) {
    if (depth > 32) return Error("nested too deeply");
    auto left = Term(depth);
    if (!left.ok()) return left;
    NodePtr out = *left;
    while (true) {
      Skip();
      if (i_ >= t_.size() || (t_[i_] != '+' && t_[i_] != '-')) return out;
      const char op = t_[i_++];
      auto right = Term(depth);
      if (!right.ok()) return right;
      out = std::make_shared<DerivedExpr::Node>(DerivedExpr::Node{op, 0, "", out, *right});
    }
  }
  absl::StatusOr<NodePtr> Term(int depth) {
    auto left = Unary(depth);
    if (!left.ok()) return left;
    NodePtr out = *left;
    while (true) {
      Skip();
      if (i_ >= t_.size() || (t_[i_] != '*' && t_[i_] != '/')) return out;
      const char op = t_[i_++];
      auto right = Unary(depth);
      if (!right.ok()) return right;
      out = std::make_shared<DerivedExpr::Node>(DerivedExpr::Node{op, 0, "", out, *right});
    }
  }
  absl::StatusOr<NodePtr> Unary(int depth) {
    Skip();
    if (i_ < t_.size() && t_[i_] == '-') {
      ++i_;
      auto inner = Unary(depth + 1);
      if (!inner.ok()) return inner;
      return std::make_shared<DerivedExpr::Node>(DerivedExpr::Node{'n', 0, "", *inner, nullptr});
    }
    return Atom(depth);
  }
  absl::StatusOr<NodePtr> Atom(int depth) {
    Skip();
    if (i_ >= t_.size()) return Error("an expression ends too early");
    const char c = t_[i_];
    if (c == '(') {
      ++i_;
      auto inner = Expr(depth + 1);
      if (!inner.ok()) return inner;
      Skip();
      if (i_ >= t_.size() || t_[i_] != ')') return Error("missing ')'");
      ++i_;
      return inner;
    }
    if (absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      const size_t from = i_;
      while (i_ < t_.size() && absl::ascii_isdigit(static_cast<unsigned char>(t_[i_]))) ++i_;
      int64_t v = 0;
      if (!absl::SimpleAtoi(t_.substr(from, i_ - from), &v) || v > kLimit) {
        return Error("a number larger than 2^40");
      }
      return std::make_shared<DerivedExpr::Node>(DerivedExpr::Node{0, v, "", nullptr, nullptr});
    }
    if (absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t from = i_;
      while (i_ < t_.size() && (absl::ascii_isalnum(static_cast<unsigned char>(t_[i_])) || t_[i_] == '_')) {
        ++i_;
      }
      std::string name = t_.substr(from, i_ - from);
      names_->insert(name);
      return std::make_shared<DerivedExpr::Node>(DerivedExpr::Node{0, 0, name, nullptr, nullptr});
    }
    return Error("unexpected '" + std::string(1, c) + "'");
  }

  const std::string& t_;
  size_t i_ = 0;
  std::set<std::string>* names_ = nullptr;
};

absl::StatusOr<int64_t> EvalNode(const DerivedExpr::Node& n,
                                 const std::map<std::string, std::string>& values) {
  auto bounded = [](int64_t v) -> absl::StatusOr<int64_t> {
    if (v > kLimit || v < -kLimit) return absl::InvalidArgumentError("a value beyond 2^40");
    return v;
  };
  if (n.op == 0) {
    if (n.name.empty()) return n.number;
    auto it = values.find(n.name);
    if (it == values.end()) return absl::InvalidArgumentError(absl::StrCat("'", n.name, "' is not a knob"));
    int64_t v = 0;
    if (!absl::SimpleAtoi(it->second, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(n.name, "=", it->second, " is not an integer"));
    }
    return bounded(v);
  }
  auto a = EvalNode(*n.left, values);
  if (!a.ok()) return a;
  if (n.op == 'n') return -*a;
  auto b = EvalNode(*n.right, values);
  if (!b.ok()) return b;
  switch (n.op) {
    case '+': return bounded(*a + *b);
    case '-': return bounded(*a - *b);
    case '*': {
      // Both within 2^40: the product fits in __int128, checked before it
      // is narrowed.
      const __int128 p = static_cast<__int128>(*a) * *b;
      if (p > kLimit || p < -kLimit) return absl::InvalidArgumentError("a value beyond 2^40");
      return static_cast<int64_t>(p);
    }
    default:
      if (*b == 0) return absl::InvalidArgumentError("a division by zero");
      if (*a % *b != 0) {
        return absl::InvalidArgumentError(absl::StrCat(*a, " / ", *b, " is not a whole number"));
      }
      return *a / *b;
  }
}

}  // namespace

absl::StatusOr<DerivedExpr> DerivedExpr::Parse(const std::string& text) {
  if (text.size() > kMaxText) {
    return absl::InvalidArgumentError(absl::StrCat("longer than ", kMaxText, " characters"));
  }
  DerivedExpr e;
  e.text_ = text;
  Parser p(e.text_);
  auto root = p.Whole(&e.names_);
  if (!root.ok()) return root.status();
  e.root_ = *root;
  return e;
}

absl::StatusOr<int64_t> DerivedExpr::Eval(const std::map<std::string, std::string>& values) const {
  if (root_ == nullptr) return absl::InvalidArgumentError("an empty expression");
  return EvalNode(*root_, values);
}

}  // namespace infrarsi
