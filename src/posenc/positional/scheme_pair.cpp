// Two schemes in one attention (the header comment).
#include "posenc/positional/scheme_pair.h"

#include <algorithm>

#include "posenc/errors.h"

namespace posenc {
namespace {

/// a + b where both are defined; whichever is, where one is.
torch::Tensor sum_defined(const torch::Tensor& a, const torch::Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return a + b;
}

class SchemePairImpl : public PositionalSchemeImpl {
 public:
  SchemePairImpl(PositionalSchemeImpl* first, PositionalSchemeImpl* second, const std::string& name)
      : PositionalSchemeImpl(name), first_(first), second_(second) {}

  Capabilities capabilities() const override {
    const Capabilities a = first_->capabilities(), b = second_->capabilities();
    Capabilities c;
    c.rotate = a.rotate || b.rotate;
    c.bias = a.bias || b.bias;
    c.score_terms = a.score_terms || b.score_terms;
    c.value_terms = a.value_terms || b.value_terms;
    c.reweight = a.reweight || b.reweight;
    return c;
  }
  bool directional() const override { return first_->directional() || second_->directional(); }
  bool offset_only() const override { return first_->offset_only() && second_->offset_only(); }
  bool supports_kv_cache() const override { return first_->supports_kv_cache() && second_->supports_kv_cache(); }
  bool self_attention_only() const override { return first_->self_attention_only() || second_->self_attention_only(); }
  bool capturable() const override { return first_->capturable() && second_->capturable(); }
  int64_t max_positions() const override {
    const int64_t a = first_->max_positions(), b = second_->max_positions();
    return a == 0 ? b : b == 0 ? a : std::min(a, b);
  }
  bool has_position_table() const override { return first_->has_position_table() || second_->has_position_table(); }
  double attention_flops(int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t Dh) const override {
    return first_->attention_flops(B, H, Lq, Lk, Dh) + second_->attention_flops(B, H, Lq, Lk, Dh);
  }

  void rotate(torch::Tensor& q, torch::Tensor& k, const Positions& pos) override {
    // At most one of the two rotates (pair_schemes); the other's call does nothing.
    first_->rotate(q, k, pos);
    second_->rotate(q, k, pos);
  }
  torch::Tensor bias(const Positions& pos) override {
    return sum_defined(uses(first_, &Capabilities::bias) ? first_->bias(pos) : torch::Tensor(),
                       uses(second_, &Capabilities::bias) ? second_->bias(pos) : torch::Tensor());
  }
  torch::Tensor score_terms(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& qk,
                            const Positions& pos) override {
    return sum_defined(
        uses(first_, &Capabilities::score_terms) ? first_->score_terms(q, k, qk, pos) : torch::Tensor(),
        uses(second_, &Capabilities::score_terms) ? second_->score_terms(q, k, qk, pos) : torch::Tensor());
  }
  torch::Tensor value_terms(const torch::Tensor& probs, const Positions& pos) override {
    return sum_defined(uses(first_, &Capabilities::value_terms) ? first_->value_terms(probs, pos) : torch::Tensor(),
                       uses(second_, &Capabilities::value_terms) ? second_->value_terms(probs, pos) : torch::Tensor());
  }
  torch::Tensor reweight(const torch::Tensor& scores, const Positions& pos) override {
    // At most one of the two reweights (pair_schemes); the other returns the scores as they are.
    return second_->reweight(first_->reweight(scores, pos), pos);
  }

 private:
  static bool uses(const PositionalSchemeImpl* s, bool Capabilities::*hook) { return s->capabilities().*hook; }

  PositionalSchemeImpl* first_;
  PositionalSchemeImpl* second_;
};

}  // namespace

PositionalScheme pair_schemes(PositionalSchemeImpl* first, PositionalSchemeImpl* second, const std::string& first_name,
                              const std::string& second_name) {
  const Capabilities a = first->capabilities(), b = second->capabilities();
  const std::string both = "model.positional.type=" + first_name + " with model.positional.with=" + second_name;
  if (a.embed || b.embed)
    throw IncompatibleConfig(both + ": " + (a.embed ? first_name : second_name) +
                             " adds positions to the residual stream, but model.positional.with pairs two schemes "
                             "in attention; an embedding goes in model.positional.input");
  if (a.rotate && b.rotate)
    throw IncompatibleConfig(both +
                             ": both rotate q and k, and one rotation after another is a third scheme, not "
                             "two; pair a rotation with a bias or a score term");
  if (a.reweight && b.reweight)
    throw IncompatibleConfig(both +
                             ": both reweight the scores before the softmax; pair one with a scheme that adds "
                             "to them");
  return std::make_shared<SchemePairImpl>(first, second, first_name + "+" + second_name);
}

}  // namespace posenc
