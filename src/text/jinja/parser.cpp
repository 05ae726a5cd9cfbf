#include "text/jinja/parser.h"

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "core/error.h"

namespace oomb::jinja {

namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& t, const std::string& name) : t_(t), name_(name) {}

  Body run() {
    Body body = statements({});
    if (peek().kind != Tok::Eof) error(fmt::format("unexpected '{{% {} %}}'", t_[pos_ + 1].text));
    return body;
  }

 private:
  const std::vector<Token>& t_;
  const std::string& name_;
  size_t pos_ = 0;
  int depth_ = 0;  // nesting of blocks and expressions
  int captured_ = 0;  // inside a macro or a block {% set %}, whose output is a value, not the template's
  int loops_ = 0;     // for loops around, within the same macro or generation block (break's and continue's)

  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.depth_ > 256) p.error("nested more than 256 deep");
    }
    ~Nest() { --p.depth_; }
  };

  [[noreturn]] void error(const std::string& what) const {
    fail("chat template {} line {}: {}", name_, t_[std::min(pos_, t_.size() - 1)].line, what);
  }
  const Token& peek(size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  const Token& next() {
    const Token& k = peek();
    if (pos_ < t_.size() - 1) ++pos_;
    return k;
  }
  bool is_op(const char* op, size_t ahead = 0) const { return peek(ahead).kind == Tok::Op && peek(ahead).text == op; }
  bool is_name(const char* n, size_t ahead = 0) const {
    return peek(ahead).kind == Tok::Name && peek(ahead).text == n;
  }
  bool skip_op(const char* op) { return is_op(op) ? (next(), true) : false; }
  bool skip_name(const char* n) { return is_name(n) ? (next(), true) : false; }
  static std::string describe(const Token& k) {
    switch (k.kind) {
      case Tok::Eof: return "the end of the template";
      case Tok::VarEnd: return "'}}'";
      case Tok::BlockEnd: return "'%}'";
      case Tok::String: return "a string";
      case Tok::Text: return "text";
      default: return "'" + k.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) error(fmt::format("expected '{}', found {}", op, describe(peek())));
  }
  void expect(Tok kind, const char* what) {
    if (peek().kind != kind) error(fmt::format("expected {}, found {}", what, describe(peek())));
    next();
  }
  std::string expect_name() {
    if (peek().kind != Tok::Name) error(fmt::format("expected a name, found {}", describe(peek())));
    return next().text;
  }

  // Statements up to a {% tag %} named in `ends` (left unread: the tag's name is current) or the end.
  Body statements(std::initializer_list<const char*> ends) {
    const Nest nest(*this);
    Body body;
    while (true) {
      const Token& k = peek();
      if (k.kind == Tok::Eof) {
        if (ends.size() > 0) error(fmt::format("the template ends before '{{% {} %}}'", *ends.begin()));
        return body;
      }
      if (k.kind == Tok::Text) {
        auto s = std::make_unique<Stmt>(Stmt{Stmt::Text, k.line});
        s->text = k.text;
        body.push_back(std::move(s));
        next();
      } else if (k.kind == Tok::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>(Stmt{Stmt::Output, k.line});
        s->expr = expression();
        expect(Tok::VarEnd, "'}}'");
        body.push_back(std::move(s));
      } else if (k.kind == Tok::BlockBegin) {
        const Token& tag = peek(1);
        for (const char* e : ends)
          if (tag.kind == Tok::Name && tag.text == e) {
            next();
            return body;
          }
        next();
        body.push_back(block());
      } else {
        error(fmt::format("unexpected {}", describe(k)));
      }
    }
  }

  // The name of the {% tag %} that ended a body; reads it and its %} for tags without arguments.
  std::string end_tag(bool bare = true) {
    std::string n = expect_name();
    if (bare) expect(Tok::BlockEnd, "'%}'");
    return n;
  }

  std::unique_ptr<Stmt> block() {
    const int line = peek().line;
    const std::string kw = expect_name();
    auto s = std::make_unique<Stmt>(Stmt{Stmt::Text, line});
    if (kw == "if") {
      s->kind = Stmt::If;
      s->conds.push_back(expression());
      expect(Tok::BlockEnd, "'%}'");
      while (true) {
        s->bodies.push_back(statements({"elif", "else", "endif"}));
        const std::string e = end_tag(false);
        if (e == "elif") {
          s->conds.push_back(expression());
          expect(Tok::BlockEnd, "'%}'");
        } else if (e == "else") {
          expect(Tok::BlockEnd, "'%}'");
          s->bodies.push_back(statements({"endif"}));
          end_tag();
          break;
        } else {
          expect(Tok::BlockEnd, "'%}'");
          break;
        }
      }
    } else if (kw == "for") {
      s->kind = Stmt::For;
      do s->targets.push_back(expect_name());
      while (skip_op(","));
      if (!skip_name("in")) error(fmt::format("expected 'in' in a for, found {}", describe(peek())));
      s->expr = or_expr();
      if (skip_name("if")) s->cond = expression(false);
      if (is_name("recursive")) error("recursive for loops are not supported");
      expect(Tok::BlockEnd, "'%}'");
      const size_t body_from = pos_;
      ++loops_;
      s->bodies.push_back(statements({"else", "endfor"}));
      --loops_;
      for (size_t i = body_from; i + 1 < pos_; ++i) {  // may the body read loop.previtem or loop.nextitem?
        const Token& k = t_[i];
        const bool named = (k.kind == Tok::Name || k.kind == Tok::String) && (k.text == "previtem" || k.text == "nextitem");
        const bool whole_loop = k.kind == Tok::Name && k.text == "loop" && !(t_[i + 1].kind == Tok::Op && t_[i + 1].text == ".");
        if (named || whole_loop) s->text = "neighbours";  // (loop['previtem'], or loop handed to a macro)
      }
      if (end_tag() == "else") {
        s->bodies.push_back(statements({"endfor"}));
        end_tag();
      }
    } else if (kw == "set") {
      s->targets.push_back(expect_name());
      if (skip_op(".")) {
        s->text = expect_name();
      } else {
        while (skip_op(",")) s->targets.push_back(expect_name());
      }
      if (skip_op("=")) {
        s->kind = Stmt::Set;
        s->expr = tuple_or_expression();
        expect(Tok::BlockEnd, "'%}'");
      } else {
        if (s->targets.size() != 1 || !s->text.empty()) error("a block {% set %} takes one name");
        s->kind = Stmt::SetBlock;
        expect(Tok::BlockEnd, "'%}'");
        ++captured_;
        s->bodies.push_back(statements({"endset"}));
        --captured_;
        end_tag();
      }
    } else if (kw == "macro") {
      s->kind = Stmt::Macro;
      s->text = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        std::string p = expect_name();
        ExprPtr def;
        if (skip_op("=")) def = expression();
        s->params.emplace_back(std::move(p), std::move(def));
        if (!skip_op(",")) break;
      }
      expect_op(")");
      expect(Tok::BlockEnd, "'%}'");
      ++captured_;
      const int loops = std::exchange(loops_, 0);
      s->bodies.push_back(statements({"endmacro"}));
      loops_ = loops;
      --captured_;
      end_tag();
    } else if (kw == "generation") {
      if (captured_ > 0) error("{% generation %} inside a macro or a block {% set %}: its output is not the template's");
      s->kind = Stmt::Generation;
      expect(Tok::BlockEnd, "'%}'");
      const int loops = std::exchange(loops_, 0);  // (a call block in Python's Jinja: loops outside are not its)
      s->bodies.push_back(statements({"endgeneration"}));
      loops_ = loops;
      end_tag();
    } else if (kw == "break" || kw == "continue") {
      if (loops_ == 0) error(fmt::format("'{{% {} %}}' outside a loop", kw));
      s->kind = kw == "break" ? Stmt::Break : Stmt::Continue;
      expect(Tok::BlockEnd, "'%}'");
    } else if (kw == "extends" || kw == "include" || kw == "import" || kw == "from" || kw == "block" ||
               kw == "call" || kw == "filter" || kw == "with" || kw == "autoescape" || kw == "do") {
      error(fmt::format("'{{% {} %}}' is not supported (oomb's Jinja subset: if, for, set, macro, generation, "
                        "break, continue, raw)",
                        kw));
    } else {
      error(fmt::format("unknown tag '{{% {} %}}'", kw));
    }
    return s;
  }

  ExprPtr node(Expr::Kind kind, int line) { return std::make_unique<Expr>(Expr{kind, line}); }

  // A node once its children are in: its depth, which is capped (a deeper tree would overflow the
  // renderer's stack, as Python's Jinja stops at its recursion limit)
  ExprPtr done(ExprPtr e) {
    int d = 0;
    bool calls = e->kind == Expr::Call;
    const auto child = [&](const Expr& x) { d = std::max(d, x.depth), calls = calls || x.calls; };
    for (const ExprPtr* c : {&e->a, &e->b, &e->c, &e->d})
      if (*c) child(**c);
    for (const auto& x : e->items) child(*x);
    for (const auto& x : e->args.positional) child(*x);
    for (const auto& kx : e->args.keyword) child(*kx.second);
    e->depth = d + 1;
    e->calls = calls;
    if (e->depth > 256) error("an expression nested more than 256 deep");
    return e;
  }

  ExprPtr tuple_or_expression() {
    const int line = peek().line;
    ExprPtr first = expression();
    if (!is_op(",")) return first;
    auto t = node(Expr::Tuple, line);
    t->items.push_back(std::move(first));
    while (skip_op(",")) {
      if (peek().kind == Tok::BlockEnd || peek().kind == Tok::VarEnd) break;
      t->items.push_back(expression());
    }
    return done(std::move(t));
  }

  // a if b else c (with_cond), else an `or` expression
  ExprPtr expression(bool with_cond = true) {
    const Nest nest(*this);
    ExprPtr e = or_expr();
    while (with_cond && is_name("if")) {
      const int line = next().line;
      auto c = node(Expr::Cond, line);
      c->b = std::move(e);
      c->a = or_expr();
      if (skip_name("else")) c->c = expression();
      e = done(std::move(c));
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto b = node(Expr::Binary, line);
    b->name = op, b->a = std::move(l), b->b = std::move(r);
    return done(std::move(b));
  }

  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (is_name("or")) {
      const int line = next().line;
      e = binary("or", std::move(e), and_expr(), line);
    }
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (is_name("and")) {
      const int line = next().line;
      e = binary("and", std::move(e), not_expr(), line);
    }
    return e;
  }
  ExprPtr not_expr() {
    const Nest nest(*this);
    if (is_name("not")) {
      auto u = node(Expr::Unary, next().line);
      u->name = "not", u->a = not_expr();
      return done(std::move(u));
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = math1();
    static const char* const ops[] = {"==", "!=", "<", ">", "<=", ">="};
    ExprPtr chain;
    while (true) {
      const int line = peek().line;
      std::string op;
      for (const char* o : ops)
        if (is_op(o)) op = o;
      if (!op.empty()) {
        next();
      } else if (is_name("in")) {
        next(), op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next(), next(), op = "not in";
      } else {
        return chain ? done(std::move(chain)) : std::move(e);
      }
      if (!chain) {
        chain = node(Expr::Compare, line);
        chain->a = std::move(e);
      }
      chain->ops.push_back(op);
      chain->items.push_back(math1());
    }
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    while (is_op("+") || is_op("-")) {
      const Token& k = next();
      e = binary(k.text, std::move(e), concat(), k.line);
    }
    return e;
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (is_op("~")) {
      const int line = next().line;
      e = binary("~", std::move(e), math2(), line);
    }
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& k = next();
      e = binary(k.text, std::move(e), pow(), k.line);
    }
    return e;
  }
  ExprPtr pow() {
    ExprPtr e = unary();
    while (is_op("**")) {
      const int line = next().line;
      e = binary("**", std::move(e), unary(), line);
    }
    return e;
  }
  ExprPtr unary(bool with_filter = true) {
    const Nest nest(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& k = next();
      e = node(Expr::Unary, k.line);
      e->name = k.text, e->a = unary(false);
      e = done(std::move(e));
    } else {
      e = primary();
    }
    e = postfix(std::move(e));
    return with_filter ? filters(std::move(e)) : std::move(e);
  }

  ExprPtr primary() {
    const Token& k = peek();
    if (k.kind == Tok::Name) {
      next();
      if (k.text == "true" || k.text == "True" || k.text == "false" || k.text == "False") {
        auto l = node(Expr::Literal, k.line);
        l->value = k.text == "true" || k.text == "True";
        return l;
      }
      if (k.text == "none" || k.text == "None") {
        auto l = node(Expr::Literal, k.line);
        l->value = nullptr;
        return l;
      }
      auto n = node(Expr::Name, k.line);
      n->name = k.text;
      return n;
    }
    if (k.kind == Tok::String) {
      auto l = node(Expr::Literal, k.line);
      std::string s;
      while (peek().kind == Tok::String) s += next().text;  // adjacent strings join
      l->value = s;
      return l;
    }
    if (k.kind == Tok::Int || k.kind == Tok::Float) {
      next();
      auto l = node(Expr::Literal, k.line);
      if (k.kind == Tok::Int) l->value = k.i;
      else l->value = k.f;
      return l;
    }
    if (is_op("(")) {
      next();
      if (skip_op(")")) return node(Expr::Tuple, k.line);
      ExprPtr e = expression();
      if (is_op(",")) {
        auto t = node(Expr::Tuple, k.line);
        t->items.push_back(std::move(e));
        while (skip_op(",")) {
          if (is_op(")")) break;
          t->items.push_back(expression());
        }
        e = done(std::move(t));
      }
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto l = node(Expr::List, k.line);
      while (!is_op("]")) {
        l->items.push_back(expression());
        if (!skip_op(",")) break;
      }
      expect_op("]");
      return done(std::move(l));
    }
    if (is_op("{")) {
      next();
      auto d = node(Expr::Dict, k.line);
      while (!is_op("}")) {
        d->items.push_back(expression());
        expect_op(":");
        d->items.push_back(expression());
        if (!skip_op(",")) break;
      }
      expect_op("}");
      return done(std::move(d));
    }
    error(fmt::format("expected a value, found {}", describe(k)));
  }

  ExprPtr postfix(ExprPtr e) {
    while (true) {
      const int line = peek().line;
      if (skip_op(".")) {
        if (peek().kind == Tok::Int) {  // a.0 is a[0]
          auto i = node(Expr::Item, line);
          i->a = std::move(e);
          i->b = node(Expr::Literal, line);
          i->b->value = next().i;
          e = done(std::move(i));
        } else {
          auto a = node(Expr::Attr, line);
          a->a = std::move(e), a->name = expect_name();
          e = done(std::move(a));
        }
      } else if (skip_op("[")) {
        e = done(subscript(std::move(e), line));
      } else if (is_op("(")) {
        e = done(call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  ExprPtr subscript(ExprPtr e, int line) {
    ExprPtr first;
    if (!is_op(":")) first = expression();
    if (!is_op(":")) {
      expect_op("]");
      auto i = node(Expr::Item, line);
      i->a = std::move(e), i->b = std::move(first);
      return i;
    }
    auto s = node(Expr::Slice, line);
    s->a = std::move(e), s->b = std::move(first);
    next();  // ':'
    if (!is_op("]") && !is_op(":")) s->c = expression();
    if (skip_op(":") && !is_op("]")) s->d = expression();
    expect_op("]");
    return s;
  }

  void arguments(Arguments& args) {
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) error("*args and **kwargs are not supported");
      if (peek().kind == Tok::Name && is_op("=", 1)) {
        std::string k = next().text;
        next();
        args.keyword.emplace_back(std::move(k), expression());
      } else {
        if (!args.keyword.empty()) error("a positional argument after a keyword argument");
        args.positional.push_back(expression());
      }
      if (!skip_op(",")) break;
    }
    expect_op(")");
  }

  ExprPtr call(ExprPtr e) {
    auto c = node(Expr::Call, peek().line);
    c->a = std::move(e);
    arguments(c->args);
    return c;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (skip_op(".")) n += "." + expect_name();
    return n;
  }

  ExprPtr filters(ExprPtr e) {
    while (true) {
      const int line = peek().line;
      if (skip_op("|")) {
        auto f = node(Expr::Filter, line);
        f->a = std::move(e), f->name = dotted_name();
        if (is_op("(")) arguments(f->args);
        e = done(std::move(f));
      } else if (skip_name("is")) {
        auto t = node(Expr::Test, line);
        t->negated = skip_name("not");
        t->a = std::move(e), t->name = dotted_name();
        const Token& k = peek();
        if (is_op("(")) {
          arguments(t->args);
        } else if ((k.kind == Tok::Name || k.kind == Tok::String || k.kind == Tok::Int || k.kind == Tok::Float ||
                    is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) error("a test's argument cannot be 'is'");
          t->args.positional.push_back(postfix(primary()));
        }
        e = done(std::move(t));
      } else if (is_op("(")) {
        e = done(call(std::move(e)));
      } else {
        return e;
      }
    }
  }
};

}  // namespace

Body parse(const std::vector<Token>& tokens, const std::string& name) { return Parser(tokens, name).run(); }

}  // namespace oomb::jinja
